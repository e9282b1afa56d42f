#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Builds every kustomization under deploy/ the way kustomize does and checks what comes out.

Debian 12's kubectl (1.20) predates the checks that broke `kubectl apply -k deploy/tunnel/`
(kustomize refuses a resource directory that contains the kustomization loading it), so this
does the parts we use itself:
  - resources: files (every YAML document) and directories (their kustomization), recursively,
    with kustomize's cycle rule: a directory resource may not contain the one that names it;
  - patches: strategic merge files must name an object the resources have (kind, name);
    JSON 6902 patches (a YAML list of ops) are applied to their target, and every op's path must
    exist (`/-` appends to a list);
  - every document: valid YAML with apiVersion, kind and metadata.name, of a kind we know;
    no two objects with the same kind, namespace and name.
Then, over each kustomization's objects: the node preparation socket-level balancing needs
(docs/operations.md): a DaemonSet whose sluice container runs it has a privileged init container
running `--init-only` with the same --bpf-root and --socket-lb-cgroup, mounting the host
directories they are on with mountPropagation Bidirectional (so a bpffs or cgroup2 it mounts
reaches the host), and the agent mounts them HostToContainer (so it sees them); a Bidirectional
mount is only in a privileged container (kubelet refuses it otherwise).
And their wiring (check_wiring):
  - a Service selects the pods of some workload in the build, and each targetPort is one of
    their container ports (by name or number);
  - a container with --proxy-server-host=NAME.NAMESPACE.svc[...] names a Service of the build
    that serves --proxy-server-port;
  - the service account of a container running sluice-tunnel-server --enable-lease-controller
    is bound (RoleBinding in --lease-namespace or ClusterRoleBinding) to rules granting get,
    create, update, list and delete on coordination.k8s.io leases; one running
    --count-server-leases to list and watch.
Also every other YAML file under deploy/ (static pods, the kube-apiserver's egress selector
configuration) must parse and be of a known kind. Exit status 1 with one line per problem.

  scripts/check-manifests.py [DEPLOY_DIR]
"""
import os
import sys

import yaml

KNOWN_KINDS = {
    "ConfigMap", "DaemonSet", "Pod", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
    "Role", "RoleBinding", "Secret", "Service", "Deployment", "EgressSelectorConfiguration",
    "Kustomization", "KubeProxyConfiguration",
}


LOADED = set()  # files a kustomization loaded; the others are checked on their own


class Problems(list):
    def add(self, where, what):
        self.append(f"{where}: {what}")


def load_docs(path, problems):
    LOADED.add(os.path.realpath(path))
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        problems.add(path, f"not valid YAML: {e}")
        return []


def check_object(doc, where, problems):
    if not isinstance(doc, dict):
        problems.add(where, "a document is not a mapping")
        return False
    for field in ("apiVersion", "kind"):
        if not doc.get(field):
            problems.add(where, f"a document has no {field}")
            return False
    if doc["kind"] not in KNOWN_KINDS:
        problems.add(where, f"unknown kind {doc['kind']}")
    if doc["kind"] not in ("Kustomization", "EgressSelectorConfiguration",
                           "KubeProxyConfiguration") and not (doc.get("metadata") or {}).get("name"):
        problems.add(where, f"{doc['kind']} without metadata.name")
        return False
    return True


def key(doc):
    meta = doc.get("metadata") or {}
    return (doc["kind"], meta.get("namespace", ""), meta["name"])


def json_patch(doc, ops, where, problems):
    for op in ops:
        path = op.get("path", "")
        if op.get("op") not in ("add", "replace", "remove") or not path.startswith("/"):
            problems.add(where, f"unsupported op {op}")
            continue
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
        node = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) and p.isdigit() else (
                node.get(p) if isinstance(node, dict) else None)
            if node is None:
                problems.add(where, f"path {path} does not exist in the target")
                break
        else:
            last = parts[-1]
            if isinstance(node, list) and op["op"] == "add" and last == "-":
                node.append(op["value"])
            elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
                node[int(last)] = op.get("value")
            elif isinstance(node, dict) and (op["op"] == "add" or last in node):
                node[last] = op.get("value")
            else:
                problems.add(where, f"path {path} does not exist in the target")


def argv(container):
    return (container.get("command") or []) + (container.get("args") or [])


def flag(args, name, default=None):
    for a in args:
        if isinstance(a, str) and a.startswith(name + "="):
            return a.split("=", 1)[1].split("#")[0].strip()
    return default


def mount_of(container, path):
    """The volumeMount of `container` that `path` is on (the longest mountPath prefix)."""
    best = None
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (
                best is None or len(mp) > len(best["mountPath"].rstrip("/"))):
            best = m
    return best


def privileged(container):
    return bool((container.get("securityContext") or {}).get("privileged"))


def check_node_init(doc, where, problems):
    if doc.get("kind") != "DaemonSet":
        return
    spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    name = (doc.get("metadata") or {}).get("name")
    inits = spec.get("initContainers") or []
    for c in inits + (spec.get("containers") or []):
        for m in c.get("volumeMounts") or []:
            if m.get("mountPropagation") == "Bidirectional" and not privileged(c):
                problems.add(where, f"{name}/{c.get('name')}: Bidirectional mount {m.get('name')} "
                                    "in a container that is not privileged")
    for c in spec.get("containers") or []:
        command = c.get("command") or ["sluice-agent"]  # the image's entrypoint
        if not str(c.get("image", "")).startswith("sluice-agent") or \
                os.path.basename(str(command[0])) not in ("sluice-agent", "kube-proxy"):
            continue  # the image's other binaries (sluice-proxy-agent) load no BPF
        args = argv(c)
        if flag(args, "--socket-lb", "auto") == "off" or flag(args, "--bpf-root") == "":
            continue
        who = f"{name}/{c.get('name')}"
        init = next((i for i in inits if "--init-only" in argv(i)), None)
        if init is None:
            problems.add(where, f"{who}: socket LB without an --init-only init container to "
                                "mount bpffs and cgroup2 on the node")
            continue
        paths = [flag(args, "--bpf-root", "/sys/fs/bpf/sluice")]
        for f in ("--bpf-root", "--socket-lb-cgroup"):
            if flag(argv(init), f) != flag(args, f):
                problems.add(where, f"{who}: init container {init.get('name')} has {f}="
                                    f"{flag(argv(init), f)}, the agent {flag(args, f)}")
        if flag(args, "--socket-lb-cgroup"):
            paths.append(flag(args, "--socket-lb-cgroup"))
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        for path in paths:
            im, am = mount_of(init, path), mount_of(c, path)
            if im is None or im.get("mountPropagation") != "Bidirectional":
                problems.add(where, f"{who}: init container {init.get('name')} does not mount "
                                    f"{path} with mountPropagation Bidirectional")
            if am is None or am.get("mountPropagation") not in ("HostToContainer",
                                                                 "Bidirectional"):
                problems.add(where, f"{who}: does not mount {path} with mountPropagation "
                                    "HostToContainer (it would not see what the init step mounts)")
            if im is not None and am is not None and im.get("name") != am.get("name"):
                problems.add(where, f"{who}: {path} is volume {am.get('name')} here, "
                                    f"{im.get('name')} in the init container")
            if im is not None and "hostPath" not in (volumes.get(im.get("name")) or {}):
                problems.add(where, f"{who}: volume {im.get('name')} for {path} is not a hostPath")


def build(directory, problems, stack=()):
    """The objects of the kustomization in `directory`."""
    directory = os.path.realpath(directory)
    kfile = os.path.join(directory, "kustomization.yaml")
    for parent in stack:
        if parent.startswith(directory + os.sep):
            problems.add(kfile, f"cycle: {directory} contains {parent}, which loads it")
            return []
    docs = load_docs(kfile, problems)
    if len(docs) != 1 or not check_object(docs[0], kfile, problems):
        return []
    kust = docs[0]
    objects = {}
    for res in kust.get("resources") or []:
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            found = build(path, problems, stack + (directory,))
        elif os.path.isfile(path):
            found = [d for d in load_docs(path, problems) if check_object(d, path, problems)]
        else:
            problems.add(kfile, f"resource {res} does not exist")
            continue
        for doc in found:
            if key(doc) in objects:
                problems.add(kfile, f"{key(doc)} defined twice")
            objects[key(doc)] = doc
    for patch in kust.get("patches") or []:
        path = os.path.join(directory, patch.get("path", ""))
        body = load_docs(path, problems)
        if len(body) == 1 and isinstance(body[0], list):
            target = patch.get("target") or {}
            hits = [d for k, d in objects.items()
                    if k[0] == target.get("kind") and k[2] == target.get("name")]
            if not hits:
                problems.add(path, f"target {target} is not among the resources")
            for d in hits:
                json_patch(d, body[0], path, problems)
        elif len(body) == 1 and check_object(body[0], path, problems):
            if key(body[0]) not in objects:
                problems.add(path, f"patches {key(body[0])}, which the resources do not have")
        else:
            problems.add(path, "a patch must be one object or one list of JSON patch ops")
    return list(objects.values())


WORKLOADS = ("Deployment", "DaemonSet", "Pod")


def pod_spec(doc):
    return doc.get("spec") or {} if doc["kind"] == "Pod" else \
        ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}


def pod_labels(doc):
    meta = doc.get("metadata") if doc["kind"] == "Pod" else \
        ((doc.get("spec") or {}).get("template") or {}).get("metadata")
    return (meta or {}).get("labels") or {}


def container_flag(container, name):
    """The value of --name in the container's command and args; "true" for a bare flag."""
    for arg in (container.get("command") or []) + (container.get("args") or []):
        if arg == "--" + name:
            return "true"
        if isinstance(arg, str) and arg.startswith("--" + name + "="):
            return arg.split("=", 1)[1]
    return None


def granted(objects, namespace, account, verbs):
    """Whether `account` may use `verbs` on coordination.k8s.io leases in `namespace`."""
    have = set()
    for (kind, ns, _), binding in objects.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding") or \
                (kind == "RoleBinding" and ns != namespace):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account and
                   s.get("namespace") == namespace for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        role = objects.get((ref.get("kind"), ns if ref.get("kind") == "Role" else "",
                            ref.get("name")))
        for rule in (role or {}).get("rules") or []:
            if "coordination.k8s.io" in (rule.get("apiGroups") or []) and \
                    "leases" in (rule.get("resources") or []):
                have |= set(rule.get("verbs") or [])
    return set(verbs) <= have or "*" in have


def check_wiring(objects, where, problems):
    workloads = [d for (k, _, _), d in objects.items() if k in WORKLOADS]
    services = {(ns, name): d for (k, ns, name), d in objects.items() if k == "Service"}
    for (ns, name), svc in services.items():
        selector = (svc.get("spec") or {}).get("selector") or {}
        pods = [w for w in workloads if selector and (w.get("metadata") or {}).get(
            "namespace", "") == ns and all(pod_labels(w).get(k) == v for k, v in selector.items())]
        if not pods:
            problems.add(where, f"Service {ns}/{name} selects no workload of the build")
            continue
        ports = set()
        for w in pods:
            for c in pod_spec(w).get("containers") or []:
                for port in c.get("ports") or []:
                    ports |= {port.get("name"), port.get("containerPort")}
        for port in (svc.get("spec") or {}).get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            if target not in ports:
                problems.add(where, f"Service {ns}/{name}: targetPort {target} is no container "
                                    "port of the pods it selects")
    for w in workloads:
        wname = f"{w['kind']} {(w.get('metadata') or {}).get('name')}"
        account = pod_spec(w).get("serviceAccountName", "default")
        for c in pod_spec(w).get("containers") or []:
            host = container_flag(c, "proxy-server-host")
            if host and ".svc" in host:
                svc_name, svc_ns = host.split(".")[:2]
                svc = services.get((svc_ns, svc_name))
                port = int(container_flag(c, "proxy-server-port") or 8091)
                if svc is None:
                    problems.add(where, f"{wname}: --proxy-server-host={host} is no Service of "
                                        "the build")
                elif port not in [p.get("port") for p in (svc.get("spec") or {}).get("ports")
                                  or []]:
                    problems.add(where, f"{wname}: Service {svc_ns}/{svc_name} has no port {port}")
            command = " ".join(c.get("command") or [])
            lease_ns = container_flag(c, "lease-namespace") or "kube-system"
            if "sluice-tunnel-server" in command and container_flag(c, "enable-lease-controller") in (
                    "true", "True"):
                if not granted(objects, lease_ns, account,
                               ("get", "create", "update", "list", "delete")):
                    problems.add(where, f"{wname}: service account {account} may not get, "
                                        f"create, update, list and delete leases in {lease_ns}")
            if container_flag(c, "count-server-leases") in ("true", "True"):
                if not granted(objects, lease_ns, account, ("list", "watch")):
                    problems.add(where, f"{wname}: service account {account} may not list and "
                                        f"watch leases in {lease_ns}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "deploy")
    problems = Problems()
    built = 0
    for directory, _, files in sorted(os.walk(root)):
        if "kustomization.yaml" in files:
            built += 1
            objects = build(directory, problems)
            if not objects:
                problems.add(directory, "builds no objects")
            for doc in objects:
                check_node_init(doc, directory, problems)
            check_wiring({key(d): d for d in objects}, directory, problems)
    kustomized = set(LOADED)
    for directory, _, files in os.walk(root):
        for f in files:
            path = os.path.realpath(os.path.join(directory, f))
            if f.endswith((".yaml", ".yml")) and path not in kustomized:
                for doc in load_docs(path, problems):
                    check_object(doc, path, problems)
    for p in problems:
        print(p)
    print(f"check-manifests: {built} kustomizations, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
