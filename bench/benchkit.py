# SPDX-License-Identifier: Apache-2.0
"""What the Python benchmarks in bench/ share: a private network namespace, free ports, the
agent's /metrics, child cgroups for socket-level balancing, and the kernel memory of the
agent's BPF maps."""
import ctypes
import errno
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

_LIBC = ctypes.CDLL(None, use_errno=True)
_SYS_BPF = 321  # x86-64


def _bpf(cmd, attr):
    """bpf(2) with `attr` a zero-filled union bpf_attr buffer; returns the result or -1."""
    return _LIBC.syscall(_SYS_BPF, cmd, attr, ctypes.sizeof(attr))


def enter_private_netns():
    """Re-executes the calling script under `unshare -n` (a fresh network namespace that
    disappears with its last process) unless it already runs there. Needs root."""
    if os.environ.get("SLUICE_BENCH_NETNS") == "1":
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark runs the agent in a private network namespace")
    env = dict(os.environ, SLUICE_BENCH_NETNS="1")
    os.execvpe("unshare", ["unshare", "-n", sys.executable] + sys.argv, env)


def exit_on_signals():
    """SIGTERM and SIGHUP unwind like Ctrl-C, so `finally` blocks clean up."""
    def raise_exit(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, raise_exit)
    signal.signal(signal.SIGHUP, raise_exit)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Metrics:
    """The agent's Prometheus text, as {"name{labels}": value}."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def scrape(self):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            self.conn.request("GET", "/metrics")
            response = self.conn.getresponse()
            text = response.read().decode()
        except OSError:
            self.conn = None
            return None
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


class Health:
    """The agent's /healthz: lastUpdated, the end of the last successful sync. Unlike /metrics
    (whose socket-LB counters cost a BPF lookup per service port and take the lock that
    programming takes), it is cheap enough to poll while the agent syncs."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def last_updated(self):
        """lastUpdated as the agent formats it ("" before the first sync), None if unreachable."""
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            self.conn.request("GET", "/healthz")
            return json.loads(self.conn.getresponse().read())["lastUpdated"]
        except (OSError, ValueError, KeyError):
            self.conn = None
            return None


def cgroup2_root():
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup2":
                return fields[1]
    raise RuntimeError("no cgroup v2 hierarchy mounted")


class ChildCgroup:
    """A cgroup v2 directory directly under the hierarchy's root, removed by remove(). Socket
    hooks attached here translate only its processes (never attach to the root: every
    process on the machine would be translated)."""

    def __init__(self, name):
        self.path = os.path.join(cgroup2_root(), f"{name}-{os.getpid()}")
        os.mkdir(self.path)

    def join_fn(self):
        """A subprocess preexec_fn that moves the child into this cgroup before exec."""
        procs = os.path.join(self.path, "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write("0")
        return join

    def pids(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return []

    def remove(self, children=()):
        """Stops `children` (Popen objects this script started) and removes the directory; a
        cgroup is removable once its processes have exited."""
        for child in children:
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)
        raise RuntimeError(f"cannot remove {self.path}: processes {self.pids()} are still in it")


def _fdinfo_ids(pid, field):
    ids = set()
    fd_dir = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fd_dir):
        try:
            with open(os.path.join(fd_dir, fd)) as f:
                for line in f:
                    if line.startswith(field):
                        ids.add(int(line.split()[1]))
        except OSError:
            continue  # closed meanwhile
    return ids


def enable_bpf_run_stats():
    """Makes the kernel count run time and runs of every BPF program while the returned fd is
    open (BPF_ENABLE_STATS: the kernel.bpf_stats_enabled sysctl, scoped to this process)."""
    attr = ctypes.create_string_buffer(128)  # enable_stats.type = BPF_STATS_RUN_TIME (0)
    fd = _bpf(32, attr)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    return fd


def bpf_prog_stats(pid, prefix="sluice_"):
    """{program name: (run_cnt, run_time_ns)} of the BPF programs process `pid` holds whose
    names start with `prefix` (counted only while run stats are enabled)."""
    ids = _fdinfo_ids(pid, "prog_id:")
    shown = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], check=True,
                                      capture_output=True, text=True).stdout)
    return {p["name"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in shown
            if p["id"] in ids and p.get("name", "").startswith(prefix)}


def bpf_maps(pid, prefix="sluice_lb_"):
    """The BPF maps process `pid` holds whose names start with `prefix`, from bpftool: a list
    of {"id", "name", "type", "max_entries", "bytes_memlock"} sorted by name. bytes_memlock is
    what the kernel charges for the map (since 6.4 its actual use: hash maps without
    preallocation count their present elements)."""
    ids = _fdinfo_ids(pid, "map_id:")
    shown = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], check=True,
                                      capture_output=True, text=True).stdout)
    keep = ("id", "name", "type", "max_entries", "bytes_memlock")
    maps = [{k: m.get(k) for k in keep} for m in shown
            if m["id"] in ids and m.get("name", "").startswith(prefix)]
    return sorted(maps, key=lambda m: m["name"])


class BpfMap:
    """Read access to a BPF map by id, to watch what the agent wrote from outside it."""

    _MAP_LOOKUP_ELEM = 1
    _MAP_GET_FD_BY_ID = 14

    def __init__(self, map_id):
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = map_id
        self.fd = _bpf(self._MAP_GET_FD_BY_ID, attr)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), f"BPF_MAP_GET_FD_BY_ID {map_id}")

    def lookup(self, key, value_size):
        """The value under `key` (bytes), or None if absent."""
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value_size)
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = self.fd
        ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(k)
        ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(v)
        return v.raw if _bpf(self._MAP_LOOKUP_ELEM, attr) == 0 else None

    def close(self):
        os.close(self.fd)


def format_maps(maps):
    total = sum(m["bytes_memlock"] for m in maps)
    parts = ", ".join(f"{m['name']} {m['bytes_memlock'] / 2**20:.2f}" for m in maps)
    return f"{total / 2**20:.1f} MiB ({parts} MiB)"


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
