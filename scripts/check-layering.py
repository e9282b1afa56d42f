#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the modules under agent/ and tunnel/ include only what their layer may use.

A module is a directory two levels deep (agent/proxy, tunnel/wire). LAYERS below is the rule:
which other modules each one may include, with the reason where it is not obvious. The data
path (proxy, fastpath) never reaches into the control plane, base depends on nothing, and the
tunnel shares only base, net and event (its sockets run on an EventLoop) with the agent. A new edge is a design decision: add it to the
table in the same change, or move the code. The table must stay acyclic (checked too). Tests
in a module follow its rule. Exit status 1 with one line per violation:

  scripts/check-layering.py [SOURCE_ROOT]
"""
import os
import re
import sys

LAYERS = {
    "agent/base": set(),
    "agent/net": {"agent/base"},
    "agent/event": {"agent/base"},
    "agent/kube": {"agent/base"},
    "agent/etcd": {"agent/base"},
    "agent/vip": {"agent/base", "agent/net"},
    "agent/config": {"agent/base", "agent/net"},
    # The one HTTP server for health, readiness and metrics (agent, tunnel server, proxy-agent),
    # served from an EventLoop so that slow clients hold fds, not threads.
    "agent/http": {"agent/base", "agent/event"},
    # Data path: sockets, BPF objects and the per-connection state machines.
    "agent/fastpath": {"agent/base", "bpf"},
    "agent/socklb": {"agent/base", "agent/net", "agent/fastpath", "bpf"},
    "agent/proxy": {"agent/base", "agent/net", "agent/event", "agent/fastpath"},
    # Control plane: turns the merged config into data-path and kernel state.
    "agent/sources": {"agent/base", "agent/config", "agent/etcd", "agent/event", "agent/kube"},
    # fastpath: the reuseport program DataPath attaches to each group of worker listeners.
    "agent/proxier": {"agent/base", "agent/config", "agent/event", "agent/fastpath", "agent/net",
                      "agent/proxy", "agent/socklb", "agent/vip"},
    "agent/admin": {"agent/base", "agent/http", "agent/net", "agent/proxier", "agent/proxy"},
    # Tunnel: wire protocol first, then each end; the server reads agent tokens from the API.
    # Its sockets and deadlines run on the agent's EventLoop (one loop, one clock).
    "tunnel/wire": {"agent/base", "agent/event"},
    "tunnel/agent": {"agent/base", "agent/event", "agent/http", "agent/net", "tunnel/wire"},
    "tunnel/server": {"agent/base", "agent/event", "agent/http", "agent/kube", "agent/net",
                      "tunnel/wire"},
    # Binaries: wire everything together.
    "agent/app": {"agent/admin", "agent/base", "agent/config", "agent/etcd", "agent/event",
                  "agent/fastpath", "agent/net", "agent/proxier", "agent/proxy", "agent/socklb",
                  "agent/sources", "agent/vip", "tunnel/agent"},
    "agent": {"agent/app", "agent/base"},  # agent/main.cc
}

INCLUDE = re.compile(r'\s*#\s*include\s+"((?:agent|tunnel|bpf)/[^"]+)"')


def module_of(path):
    """agent/proxy/worker.cc -> agent/proxy; agent/main.cc -> agent; bpf/... -> bpf."""
    parts = path.split("/")
    if parts[0] == "bpf":
        return "bpf"
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def acyclic(layers):
    state = {}

    def visit(m, stack):
        if state.get(m) == "done":
            return None
        if state.get(m) == "open":
            return stack[stack.index(m):] + [m]
        state[m] = "open"
        for dep in sorted(layers.get(m, ())):
            cycle = visit(dep, stack + [m])
            if cycle:
                return cycle
        state[m] = "done"
        return None

    for m in sorted(layers):
        cycle = visit(m, [])
        if cycle:
            return cycle
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = []
    cycle = acyclic(LAYERS)
    if cycle:
        problems.append("scripts/check-layering.py: LAYERS has a cycle: " + " -> ".join(cycle))
    for top in ("agent", "tunnel"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mod = module_of(path)
                if mod not in LAYERS:
                    problems.append(f"{path}: module {mod} is not in scripts/check-layering.py")
                    continue
                allowed = LAYERS[mod] | {mod}
                with open(os.path.join(root, path), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and module_of(m.group(1)) not in allowed:
                            problems.append(f"{path}:{lineno}: {mod} may not include "
                                            f"{m.group(1)} (scripts/check-layering.py)")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
