#!/usr/bin/env python3
"""trace_phases.py - turns perf traces of agentbox commands into phase timings.

  trace_phases.py start FILE...          perf trace output of `agentbox create` or
                                         `agentbox start` (one file per run)
  trace_phases.py stop FILE...           perf trace output of `agentbox stop`
  trace_phases.py exec FILE:PID...       `perf script -F comm,pid,time,event,trace` of a
                                         system-wide record around one `agentbox exec`;
                                         PID is the box's init (host pid)

Prints one line per phase: median, min and max over the runs, in ms.
Phases are cut at syscalls the engine makes in a fixed order (see
src/native/box.c, rootfs.c, loopdisk.c); a run where a marker is missing is
reported and skipped. Python 3 standard library only.
"""
import re
import statistics
import sys

# perf trace: "    12.463 ( 0.039 ms): comm/pid call(args) = ret"; unfinished calls
# have an empty duration; "? (...)" continuation lines have no start time.
LINE = re.compile(r"^\s*([\d.]+) \(\s*([\d.]*)\s*(?:ms)?\): (.*?)/(\d+) (\w+)\((.*)$")


def parse_trace(path):
    ev = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            ts, dur, comm, pid, call, rest = m.groups()
            ev.append({
                "ts": float(ts),
                "end": float(ts) + (float(dur) if dur else 0.0),
                "comm": comm,
                "pid": int(pid),
                "call": call,
                "args": rest,
            })
    ev.sort(key=lambda e: e["ts"])
    return ev


def first(ev, after, pred):
    for e in ev:
        if e["ts"] >= after and pred(e):
            return e
    return None


CLONE_NEWNS = "131072"
CLONE_NEWPID = "536870912"


def start_phases(ev):
    """Phases of create (with mkfs) or start (without)."""
    if not ev:
        return None
    main = ev[0]["pid"]
    end = [e for e in ev if e["pid"] == main and e["call"] == "exit_group"]
    if not end:
        return None
    t_end = end[-1]["ts"]
    clones = [e for e in ev if e["pid"] == main and e["call"] == "clone"]
    mkfs_exit = first(ev, 0, lambda e: e["comm"].startswith("mkfs") and e["call"] == "exit_group")
    out = []
    t = 0.0
    if mkfs_exit:
        a = clones[0]
        out.append(("CLI start, backend open (seccomp filter), uid alloc", a["ts"] - t))
        out.append(("mkfs.ext4 (fork + exec + write the fs)", mkfs_exit["ts"] - a["ts"]))
        t = mkfs_exit["ts"]
        spawn = first(ev, t, lambda e: e["pid"] == main and e["call"] == "clone")
        label = "config.json, cgroup mkdir + limits, socket, init memfd"
    else:
        spawn = clones[0] if clones else None
        label = "CLI start, backend open, lock, cgroup mkdir + limits, socket, memfd"
    if not spawn:
        return None
    out.append((label, spawn["ts"] - t))
    # Find the setup process P: the child of that clone (first event of a new pid after it).
    p_ns = first(ev, spawn["ts"], lambda e: e["call"] == "unshare" and e["args"].startswith("unshare_flags: " + CLONE_NEWNS + ")"))
    if not p_ns:
        return None
    P = p_ns["pid"]
    out.append(("fork setup process + join cgroups (v1 migration)", p_ns["ts"] - spawn["ts"]))
    loop = first(ev, p_ns["ts"], lambda e: e["pid"] == P and e["call"] == "ioctl" and "0x4c, 0x82" in e["args"])
    if not loop:
        return None
    out.append(("mount ns + idmap user ns (fork helper, uid map)", loop["ts"] - p_ns["ts"]))
    mask = first(ev, loop["ts"], lambda e: e["pid"] == P and e["call"] == "mount" and "flags: NOSUID|NODEV|NOEXEC," in e["args"])
    if not mask:
        return None
    out.append(("loop attach + ext4 mount + disk dirs", mask["ts"] - loop["ts"]))
    mask_ro = first(ev, mask["ts"], lambda e: e["pid"] == P and e["call"] == "mount" and "RDONLY|NOSUID|NODEV|NOEXEC|REMOUNT" in e["args"])
    if not mask_ro:
        return None
    out.append(("rootfs mask/skeleton tmpfs (whiteouts, hide walk)", mask_ro["ts"] - mask["ts"]))
    pidns = first(ev, mask_ro["ts"], lambda e: e["pid"] == P and e["call"] == "unshare" and CLONE_NEWPID in e["args"])
    if not pidns:
        return None
    out.append(("idmapped lower(s) + overlay(s), binds, /tmp /run /dev", pidns["ts"] - mask_ro["ts"]))
    exe = first(ev, pidns["ts"], lambda e: e["call"] == "execveat")
    if not exe:
        return None
    out.append(("pid ns, fork init, user+5 ns, pivot_root, seccomp, exec init", exe["end"] - pidns["ts"]))
    out.append(("report back, state.json, CLI exit", t_end - exe["end"]))
    out.append(("TOTAL (traced)", t_end))
    return out


def stop_phases(ev):
    if not ev:
        return None
    main = ev[0]["pid"]
    end = [e for e in ev if e["pid"] == main and e["call"] == "exit_group"]
    sig = first(ev, 0, lambda e: e["pid"] == main and e["call"] == "pidfd_send_signal")
    if not end or not sig:
        return None
    polls = [e for e in ev if e["pid"] == main and e["call"] in ("poll", "ppoll") and e["ts"] >= sig["ts"]]
    if not polls:
        return None
    dead = polls[0]["end"] or polls[0]["ts"]
    t_end = end[-1]["ts"]
    return [
        ("CLI start, backend open, lock, state, pidfd", sig["ts"]),
        ("SIGKILL -> init gone (ns + mount teardown)", dead - sig["ts"]),
        ("cgroup kill + rmdir, state removal, CLI exit", t_end - dead),
        ("TOTAL (traced)", t_end),
    ]


# perf script -F comm,pid,time,event,trace
SCRIPT = re.compile(r"^\s*(.+?)\s+(\d+)\s+([\d.]+):\s+(\S+):\s?(.*)$")


def exec_phases(path, init_pid):
    evs = []
    with open(path, errors="replace") as f:
        for line in f:
            m = SCRIPT.match(line)
            if m:
                comm, pid, ts, event, rest = m.groups()
                evs.append((float(ts) * 1e3, comm.strip(), int(pid), event, rest))
    evs.sort()
    # The CLI is the first process exec'ing .../agentbox; the box tree hangs off init.
    cli = next((e for e in evs if e[3] == "sched:sched_process_exec" and re.search(r"filename=\S*/agentbox ", e[4])), None)
    if not cli:
        return None
    tree = {init_pid, cli[2]}
    for e in evs:
        if e[3] == "sched:sched_process_fork":
            m = re.search(r" pid=(\d+) child_comm=.* child_pid=(\d+)", e[4])
            if m and int(m.group(1)) in tree:
                tree.add(int(m.group(2)))
    mine = [e for e in evs if e[2] in tree and e[0] >= cli[0]]

    def find(pred, after=0.0):
        return next((e for e in mine if e[0] >= after and pred(e)), None)

    t0 = cli[0]
    con = find(lambda e: e[2] == cli[2] and e[3] == "syscalls:sys_enter_connect")
    acc = find(lambda e: e[2] == init_pid and e[3] == "syscalls:sys_exit_accept4", con[0] if con else 0)
    sess = find(lambda e: e[2] == init_pid and e[3] == "sched:sched_process_fork", acc[0] if acc else 0)
    if not (con and acc and sess):
        return None
    spid = int(re.search(r"child_pid=(\d+)", sess[4]).group(1))
    bfork = find(lambda e: e[2] == spid and e[3] == "sched:sched_process_fork", sess[0])
    if not bfork:
        return None
    bpid = int(re.search(r"child_pid=(\d+)", bfork[4]).group(1))
    bexec = find(lambda e: e[2] == bpid and e[3] == "sched:sched_process_exec", bfork[0])
    bexit = find(lambda e: e[2] == bpid and e[3] == "sched:sched_process_exit", bfork[0])
    cexit = find(lambda e: e[2] == cli[2] and e[3] == "sched:sched_process_exit")
    if not (bexec and bexit and cexit):
        return None
    # Children bash starts while it reads /etc/profile (e.g. `id -u`).
    kids = []
    for e in mine:
        if e[3] == "sched:sched_process_exec" and e[2] != bpid and bexec[0] <= e[0] <= bexit[0]:
            m = re.search(r"filename=(\S+)", e[4])
            ex = find(lambda x, p=e[2]: x[2] == p and x[3] == "sched:sched_process_exit", e[0])
            kids.append((m.group(1) if m else "?", e[0], ex[0] if ex else e[0]))
    out = [
        ("CLI start + backend open + box lookup, until connect()", con[0] - t0),
        ("connect -> init accept4", acc[0] - con[0]),
        ("init forks the session", sess[0] - acc[0]),
        ("session reads EXEC, forks the command", bfork[0] - sess[0]),
        ("fork -> exec of /bin/bash", bexec[0] - bfork[0]),
        ("bash -lc true runs (profile, ...) until exit", bexit[0] - bexec[0]),
    ]
    for name, a, b in kids:
        out.append(("    of which %s (exec..exit)" % name.rsplit("/", 1)[-1], b - a))
    out.append(("bash exit -> EXIT frame -> CLI exit", cexit[0] - bexit[0]))
    out.append(("TOTAL (traced)", cexit[0] - t0))
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("start", "stop", "exec"):
        print(__doc__, file=sys.stderr)
        return 2
    mode = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        if mode == "exec":
            path, pid = arg.rsplit(":", 1)
            r = exec_phases(path, int(pid))
        else:
            ev = parse_trace(arg)
            r = start_phases(ev) if mode == "start" else stop_phases(ev)
        if r is None:
            print("  (run %s: markers not found, skipped)" % arg, file=sys.stderr)
            continue
        runs.append(r)
    if not runs:
        return 1
    # Phases may differ in count between runs (exec children); align by name, in order.
    names = []
    for r in runs:
        for n, _ in r:
            if n not in names:
                names.append(n)
    print("  %-66s %8s %8s %8s   (ms, %d runs)" % ("phase", "median", "min", "max", len(runs)))
    for n in names:
        v = [sum(x for m, x in r if m == n) for r in runs if any(m == n for m, _ in r)]
        print("  %-66s %8.2f %8.2f %8.2f" % (n, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
