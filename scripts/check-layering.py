#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the layering of the tree: tiers of modules, and what each module may include.

A module is a folder of code: lib/base, agent/dataplane/proxy, tunnel/wire, agent/app, agent
(agent/main.cc), bpf. TIERS lists them from the bottom up. A module may include:
  - any module of a tier its tier builds on (USES), and
  - within its own tier, only the modules EDGES names for it (with the reason where it is not
    obvious); the edges must stay acyclic (checked).
So the foundations (lib/) include nothing above them, the data plane never reaches into the
control plane, and the tunnel builds on lib/ alone. A new edge is a design decision: add it here
in the same change, or move the code. Tests in a module follow its rule.

It also checks that docs/architecture.md's module table ("## Layout") lists exactly these
modules, tier by tier, in this order. Exit status 1 with one line per problem:

  scripts/check-layering.py [SOURCE_ROOT]
  scripts/check-layering.py --tiers     prints the tiers and modules, bottom up
"""
import os
import re
import sys

# (tier, modules, tiers it builds on), bottom up.
TIERS = [
    ("foundation", ["lib/base", "lib/net", "lib/event", "lib/http", "lib/kube", "lib/etcd",
                    "lib/cli"], []),
    ("kernel programs", ["bpf"], []),
    ("data plane", ["agent/dataplane/fastpath", "agent/dataplane/proxy",
                    "agent/dataplane/socklb", "agent/dataplane/extnat", "agent/dataplane/vip"],
     ["foundation", "kernel programs"]),
    ("control plane", ["agent/control/config", "agent/control/sources",
                       "agent/control/proxier", "agent/control/admin"],
     ["foundation", "data plane"]),
    ("tunnel", ["tunnel/wire", "tunnel/agent", "tunnel/server"], ["foundation"]),
    ("app", ["agent/app", "agent"], ["foundation", "data plane", "control plane", "tunnel"]),
]

# Edges inside a tier.
EDGES = {
    "lib/net": {"lib/base"},
    "lib/event": {"lib/base"},
    # The one HTTP server for health, readiness and metrics of all three binaries, served from
    # an EventLoop so that slow clients hold fds, not threads.
    "lib/http": {"lib/base", "lib/event"},
    "lib/kube": {"lib/base"},
    "lib/etcd": {"lib/base"},
    # The agent's main thread runs an EventLoop: its shutdown signals arrive on a signalfd there.
    # The tunnel binaries' health and admin ports are StatusServers.
    "lib/cli": {"lib/base", "lib/event", "lib/http"},
    "agent/dataplane/proxy": {"agent/dataplane/fastpath"},
    "agent/dataplane/socklb": {"agent/dataplane/fastpath"},
    # Its frontends and backend sets are the socket-LB layouts, programmed by socklb::ServiceMaps.
    "agent/dataplane/extnat": {"agent/dataplane/fastpath", "agent/dataplane/socklb"},
    "agent/control/sources": {"agent/control/config"},
    "agent/control/proxier": {"agent/control/config"},
    "agent/control/admin": {"agent/control/proxier"},
    # Wire protocol first, then each end.
    "tunnel/agent": {"tunnel/wire"},
    "tunnel/server": {"tunnel/wire"},
    "agent": {"agent/app"},
}

INCLUDE = re.compile(r'\s*#\s*include\s+"((?:lib|agent|tunnel|bpf)/[^"]+)"')
DOC_ROW = re.compile(r"^\| `([a-z/]+)` \|")
TIER_OF = {m: tier for tier, mods, _ in TIERS for m in mods}
MODULES = [m for _, mods, _ in TIERS for m in mods]


def module_of(path):
    """The longest module that is a folder prefix of path (agent/main.cc -> agent)."""
    best = None
    for m in MODULES:
        if path.startswith(m + "/") and (best is None or len(m) > len(best)):
            best = m
    return best


def allowed(mod):
    tier = TIER_OF[mod]
    uses = next(u for t, _, u in TIERS if t == tier)
    return {m for m in MODULES if TIER_OF[m] in uses} | EDGES.get(mod, set()) | {mod}


def acyclic():
    state = {}

    def visit(m, stack):
        if state.get(m) == "done":
            return None
        if state.get(m) == "open":
            return stack[stack.index(m):] + [m]
        state[m] = "open"
        for dep in sorted(EDGES.get(m, ())):
            cycle = visit(dep, stack + [m])
            if cycle:
                return cycle
        state[m] = "done"
        return None

    for m in sorted(EDGES):
        cycle = visit(m, [])
        if cycle:
            return cycle
    return None


def check_edges():
    problems = []
    cycle = acyclic()
    if cycle:
        problems.append("scripts/check-layering.py: EDGES has a cycle: " + " -> ".join(cycle))
    for mod, deps in EDGES.items():
        for dep in deps | {mod}:
            if dep not in TIER_OF:
                problems.append(f"scripts/check-layering.py: EDGES names unknown module {dep}")
        for dep in deps:
            if dep in TIER_OF and mod in TIER_OF and TIER_OF[dep] != TIER_OF[mod]:
                problems.append(f"scripts/check-layering.py: EDGES {mod} -> {dep} crosses tiers")
    return problems


def check_includes(root):
    problems = []
    for top in ("lib", "agent", "tunnel"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mod = module_of(path)
                if mod is None:
                    problems.append(f"{path}: in no module of scripts/check-layering.py")
                    continue
                ok = allowed(mod)
                with open(os.path.join(root, path), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and module_of(m.group(1)) not in ok:
                            problems.append(f"{path}:{lineno}: {mod} ({TIER_OF[mod]}) may not "
                                            f"include {m.group(1)} (scripts/check-layering.py)")
    return problems


def check_docs(root):
    """docs/architecture.md's module table lists the modules, tier by tier, in TIERS' order."""
    doc = os.path.join(root, "docs", "architecture.md")
    if not os.path.exists(doc):
        return []
    rows, in_layout = [], False
    with open(doc) as f:
        for line in f:
            if line.startswith("## "):
                in_layout = line.strip() == "## Layout"
            elif in_layout and DOC_ROW.match(line):
                rows.append(DOC_ROW.match(line).group(1))
    if rows != MODULES:
        return [f"docs/architecture.md: the module table under '## Layout' lists {rows}; "
                f"scripts/check-layering.py has {MODULES} (same order, bottom up)"]
    return []


def main():
    if sys.argv[1:] == ["--tiers"]:
        for tier, mods, uses in TIERS:
            print(f"{tier} (on {', '.join(uses) or 'nothing'}): {' '.join(mods)}")
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check_edges() + check_includes(root) + check_docs(root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
