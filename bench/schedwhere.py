#!/usr/bin/python3
"""bench/schedwhere.py — where the CPU of a burst goes, task by task, and what
ran while the editor's main thread waited for a CPU (issue 30, the fan-out).

    bench/schedwhere.py [--json FILE] -- COMMAND ARGS...

Runs COMMAND under `perf record -a` of the scheduler's tracepoints (switch,
wakeup, fork, exec, exit; CLOCK_MONOTONIC time stamps), as root, and prints:

- per task of COMMAND's process tree (every task it forked, and threads), by
  role: its CPU time, its wakeups (sched_wakeup aimed at it) and the time it
  was runnable without a CPU; the roles are the host's main thread, its other
  threads (by name: the engine thread, libuv's, the history writer), the
  shepherd (`proctor-shepherd` exec'd), the reapers (the shepherd's forks)
  and the jobs (what a reaper forked, and theirs);
- the same for kernel threads (ksoftirqd, kworker, rcu ...) and for every
  other process of the machine ("others": other users' work);
- the irq and softirq time of /proc/stat over the run;
- with COMMAND's result (BENCH_OUT, bench/nvim/peers.lua with
  BENCH_TICK_LOG=ms): the window of the fan-out (`t0_mono_ms`..`t1_mono_ms`)
  and, for each long tick (`long_ticks.long[].t`, `.wall`), the CPU time each
  role used while that tick lasted, and the main thread's run-queue wait.

Nothing is started inside the measured program; perf's own cost lands in
"others". Not run by bench/run (it needs root and perf); its header says how.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

EVENTS = ",".join("sched:" + e for e in (
    "sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_fork",
    "sched_process_exec", "sched_process_exit"))
LINE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s*(.*)$")
KV = re.compile(r"(\w+)=(\S+)")
KTHREAD = re.compile(r"^(ksoftirqd|kworker|rcu|migration|kcompactd|kswapd|khugepaged|"
                     r"jbd2|kthreadd|watchdog|cpuhp|idle_inject|irq/|writeback|oom_reaper)")


def proc_stat():
    """irq and softirq jiffies summed over CPUs, and USER_HZ."""
    with open("/proc/stat") as f:
        v = f.readline().split()
    return int(v[6]), int(v[7])


def main():
    args = sys.argv[1:]
    out_json = None
    if args[:1] == ["--json"]:
        out_json, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    tmp = tempfile.mkdtemp(prefix="schedwhere.")
    data = os.path.join(tmp, "perf.data")
    bench_out = os.environ.get("BENCH_OUT")
    irq0 = proc_stat()
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-e", EVENTS,
                             "-o", data, "--"] + args, stdout=subprocess.DEVNULL)
    rc = perf.wait()
    irq1 = proc_stat()
    hz = os.sysconf("SC_CLK_TCK")
    script = subprocess.run(["perf", "script", "-i", data, "--ns", "-F",
                             "comm,pid,tid,cpu,time,event,trace"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    res = None
    if bench_out and os.path.exists(bench_out):
        with open(bench_out) as f:
            res = json.load(f)
    report = analyse(script, res, perf.pid)
    report["irq_ms"] = (irq1[0] - irq0[0]) * 1000 / hz
    report["softirq_ms"] = (irq1[1] - irq0[1]) * 1000 / hz
    report["command_rc"] = rc
    print_report(report)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(report, f, indent=1)
    subprocess.call(["rm", "-rf", tmp])


def analyse(script, res, perf_pid):
    tgid = {}          # tid -> tgid
    comm = {}          # tid -> last comm
    parent = {}        # tid -> the tid that forked it
    exe = {}           # tid -> last exec'd file
    on_cpu = {}        # cpu -> (tid, since)
    ready = {}         # tid -> time it became runnable (wakeup or preempted)
    run = []           # (tid, start, end): on-CPU intervals
    waits = []         # (tid, start, end): runnable without a CPU
    wakeups = {}
    t_first = t_last = None
    root = None
    perf_exec = set()
    for line in script.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        c, pid, tid, cpu, t, ev, rest = m.groups()
        pid, tid, cpu, t = int(pid), int(tid), int(cpu), float(t) * 1000
        t_first = t if t_first is None else t_first
        t_last = t
        tgid.setdefault(tid, pid)
        comm.setdefault(tid, c)
        kv = dict(KV.findall(rest))
        for k in ("comm", "next_comm", "prev_comm"):
            if kv.get(k) == "perf-exec":
                perf_exec.add(int(kv["pid" if k == "comm" else k[:5] + "pid"]))
        if ev == "sched_process_fork":
            ch = int(kv["child_pid"])
            parent[ch] = tid
            comm[ch] = kv["child_comm"]
        elif ev == "sched_process_exec":
            exe[tid] = rest.split("filename=")[1].split(" pid=")[0]
            comm[tid] = c
            if root is None and (parent.get(tid) == perf_pid or tid in perf_exec):
                root = tid  # perf's child (named perf-exec until then) execs the command
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            w = int(kv["pid"])
            wakeups[w] = wakeups.get(w, 0) + 1
            ready.setdefault(w, t)
        elif ev == "sched_switch":
            prev, nxt = int(kv["prev_pid"]), int(kv["next_pid"])
            st = kv["prev_state"]
            if cpu in on_cpu and on_cpu[cpu][0] == prev:
                run.append((prev, on_cpu[cpu][1], t))
            comm[prev] = kv["prev_comm"]
            comm.setdefault(nxt, kv["next_comm"])
            if st.startswith("R"):
                ready[prev] = t
            if nxt in ready:
                waits.append((nxt, ready.pop(nxt), t))
            on_cpu[cpu] = (nxt, t)
    for cpu, (tid, since) in on_cpu.items():
        run.append((tid, since, t_last))

    # The command's tree: every task forked from the root, and their threads.
    tree = {}
    if root is not None:
        tree[root] = True
        changed = True
        while changed:
            changed = False
            for ch, p in parent.items():
                if ch not in tree and p in tree:
                    tree[ch] = True
                    changed = True
    # The host: the first task of the tree that exec'd an nvim (or lua); else the root.
    host = next((t for t in sorted(tree) if re.search(r"/(nvim|lua)[^/]*$", exe.get(t, ""))), root)
    # A thread of the host (the same tgid: clone with CLONE_THREAD) vs a child.
    # The shepherd: the exec'd proctor-shepherd and the fork it daemonizes into
    # (the exec'd one exits at once); its own forks that exec nothing are reapers.
    shepherd = {t for t in tree if "proctor-shepherd" in exe.get(t, "")}
    shepherd |= {t for t in tree if parent.get(t) in shepherd and t not in exe}

    def role(t):
        if t == 0:
            return "idle"
        if t in tree:
            if t == host:
                return "host main thread"
            if tgid.get(t) == host:
                if any(parent.get(sh) == t for sh in shepherd):
                    return "host: engine thread"  # the one that started the shepherd
                return "host: other threads"
            if t in shepherd:
                return "shepherd"
            p = parent.get(t)
            if p in shepherd and t not in exe:
                return "reapers"
            if p in shepherd:
                return "shepherd's other children"
            return "jobs: " + os.path.basename(exe.get(t) or comm.get(t) or "?")
        if KTHREAD.match(comm.get(t, "")):
            return "kernel threads"
        return "others (not this run)"

    win = (t_first, t_last)
    if res and res.get("t0_mono_ms"):
        win = (float(res["t0_mono_ms"]), float(res.get("t1_mono_ms") or t_last))

    def clip(iv, a, b):
        return max(0.0, min(iv[2], b) - max(iv[1], a))

    rows = {}
    for iv in run:
        r = rows.setdefault(role(iv[0]), {"cpu_ms": 0.0, "wait_ms": 0.0, "wakeups": 0, "tasks": set()})
        r["cpu_ms"] += clip(iv, *win)
        if clip(iv, *win) > 0:
            r["tasks"].add(iv[0])
    for iv in waits:
        r = rows.setdefault(role(iv[0]), {"cpu_ms": 0.0, "wait_ms": 0.0, "wakeups": 0, "tasks": set()})
        r["wait_ms"] += clip(iv, *win)
    for t, n in wakeups.items():
        r = rows.setdefault(role(t), {"cpu_ms": 0.0, "wait_ms": 0.0, "wakeups": 0, "tasks": set()})
        r["wakeups"] += n  # over the whole recording
    for r in rows.values():
        r["tasks"] = len(r["tasks"])

    ticks = []
    if res:
        log = res.get("long_ticks") or {}
        for lt in log.get("long", []):
            if "t" not in lt:
                continue
            a = float(log["t0_mono_ms"]) + lt["t"]
            b = a + lt["wall"]
            by = {}
            for iv in run:
                if iv[2] > a and iv[1] < b:
                    k = role(iv[0])
                    by[k] = by.get(k, 0.0) + clip(iv, a, b)
            mw = sum(clip(iv, a, b) for iv in waits if iv[0] == host)
            ticks.append({"t": a, "wall": lt["wall"], "cpu": lt["cpu"], "main_wait": mw,
                          "by_role": by})
    cpu_of = {}
    for iv in run:
        cpu_of[iv[0]] = cpu_of.get(iv[0], 0.0) + iv[2] - iv[1]
    tasks = [{"tid": t, "parent": parent.get(t), "tgid": tgid.get(t), "comm": comm.get(t),
              "exe": exe.get(t), "role": role(t), "cpu_ms": cpu_of.get(t, 0.0),
              "wakeups": wakeups.get(t, 0)} for t in sorted(tree)]
    return {"window_ms": win[1] - win[0], "rows": rows, "long_ticks": ticks, "tasks": tasks,
            "result": {k: v for k, v in (res or {}).items() if k not in ("long_ticks",)}}


def print_report(rep):
    print("window %.0f ms; irq %.0f ms, softirq %.0f ms (/proc/stat, whole machine)"
          % (rep["window_ms"], rep["irq_ms"], rep["softirq_ms"]))
    print("%-34s %9s %9s %8s %6s" % ("role", "CPU ms", "wait ms", "wakeups", "tasks"))
    for k, r in sorted(rep["rows"].items(), key=lambda kv: -kv[1]["cpu_ms"]):
        print("%-34s %9.1f %9.1f %8d %6d" % (k, r["cpu_ms"], r["wait_ms"], r["wakeups"], r["tasks"]))
    lt = rep["long_ticks"]
    if lt:
        tot = {}
        for t in lt:
            for k, v in t["by_role"].items():
                tot[k] = tot.get(k, 0.0) + v
        print("\n%d long ticks: %.0f ms wall, %.0f ms main CPU, %.0f ms main run-queue wait; "
              "CPU used meanwhile by role (2 CPUs):" % (
                  len(lt), sum(t["wall"] for t in lt), sum(t["cpu"] for t in lt),
                  sum(t["main_wait"] for t in lt)))
        for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
            print("  %-34s %8.1f ms" % (k, v))


if __name__ == "__main__":
    main()
