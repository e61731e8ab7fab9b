#!/usr/bin/python3
"""perfsplit: where the host's CPU goes while a command runs, split into
agentbox's own processes and, for each QEMU process, what QEMU did:
translate guest code (TCG), run translated code, start up (the dynamic
linker), emulate devices and load state, or wait in the host kernel.

Usage (as root, with Debian's linux-perf installed):

    python3 ci/perfsplit.py [-F HZ] [--pid PID]... -- COMMAND [ARG]...
    python3 ci/perfsplit.py --script FILE [-F HZ] [--pid PID]...

The first form samples every CPU (perf record -a, DWARF call graphs from
the binaries' .eh_frame; Debian's QEMU is stripped but exports its
translator's entry points) while COMMAND runs, e.g. a fork through the
API with curl. The second reads `perf script -F comm,pid,tid,time,ip,sym,dso`
output. --pid leaves a QEMU process out of the children's sum (the
parent of a fork); each QEMU process is also printed on its own.

A sample is classed by its call chain:
  TCG translate      under tb_gen_code (or the translator's other entries)
  startup            under the dynamic linker (_dl_start, _dl_relocate_object)
  TCG run            in anonymous code on a vCPU thread (the code cache)
  TCG loop/softmmu   under cpu_exec, in the softmmu (TLB fills, load and
                     store helpers) or TB bookkeeping, or unresolved on a
                     vCPU thread
  host kernel        in the kernel (page faults, syscalls)
  QEMU other         the rest: device emulation, migration load, main loop
The classes are what the symbols allow; see the notes of issue 12.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

TRANSLATE = {"tb_gen_code", "tcg_gen_code", "gen_intermediate_code", "translator_loop", "tcg_optimize"}
LINKER = {"_dl_start", "dl_main", "_dl_relocate_object", "_dl_start_final", "_dl_map_object"}
EXEC_LOOP = {"cpu_exec", "tcg_cpus_exec", "qht_lookup_custom", "tb_htable_lookup", "helper_lookup_tb_ptr",
             "tcg_flush_jmp_cache", "page_collection_lock", "x86_cpu_tlb_fill", "bitmap_set_atomic"}
# The softmmu (the emulated MMU: TLB fills, guest loads and stores through
# helpers) and the translation blocks' bookkeeping, by name prefix.
SOFTMMU = ("helper_le_", "helper_be_", "helper_ret_", "cpu_ld", "cpu_st", "tlb_", "probe_access",
           "get_page_addr_code", "tb_invalidate", "tb_page_", "tb_phys_", "tcg_")
HEAD = re.compile(r"(.+?)\s+(-?\d+)/(-?\d+)\s+([\d.]+):")
FRAME = re.compile(r"(.*) \((.*)\)$")


def samples(lines):
    """Yields (comm, pid, tid, frames) per sample; frames are (symbol, dso), leaf first."""
    cur = None
    for line in lines:
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        if line[0] not in " \t":
            m = HEAD.match(line)
            cur = (m.group(1).strip(), int(m.group(2)), int(m.group(3)), []) if m else None
        elif cur:
            parts = line.strip().split(None, 1)
            m = FRAME.match(parts[1] if len(parts) > 1 else "")
            cur[3].append((m.group(1).split("+")[0], m.group(2)) if m else ("", ""))
    if cur:
        yield cur


def classify(pid, tid, frames):
    syms = {s for s, _ in frames}
    leaf, dso = frames[0] if frames else ("", "")
    if syms & TRANSLATE:
        return "TCG translate"
    if syms & LINKER:
        return "startup: dynamic linker"
    anon = dso in ("[unknown]", "") or dso.startswith("/tmp/perf-")
    if anon and tid != pid and len(frames) <= 3:
        return "TCG run translated code"
    if syms & EXEC_LOOP or any(x.startswith(SOFTMMU) for x in syms) or (anon and tid != pid):
        return "TCG loop, softmmu, helpers"
    if "kallsyms" in dso:
        return "host kernel (faults, syscalls)"
    return "QEMU other (devices, state load, main loop)"


def report(lines, hz, parents, out):
    per = 1000.0 / hz
    procs, qemu, kids = collections.Counter(), collections.defaultdict(collections.Counter), collections.Counter()
    for comm, pid, tid, frames in samples(lines):
        if comm == "swapper":
            procs["(idle)"] += 1
            continue
        if not comm.startswith("qemu"):
            procs[comm] += 1
            continue
        c = classify(pid, tid, frames)
        qemu[pid][c] += 1
        procs["QEMU %d" % pid] += 1
        if pid not in parents:
            kids[c] += 1
    print("CPU by process (ms):", file=out)
    for k, v in procs.most_common(12):
        print(f"  {k:40s} {v * per:8.0f}", file=out)
    for pid, c in sorted(qemu.items()):
        total = sum(c.values())
        print(f"QEMU {pid}: {total * per:.0f} ms", file=out)
        for k, v in c.most_common():
            print(f"  {k:45s} {v * per:8.0f} ms {100 * v / total:4.0f} %", file=out)
    n = len([p for p in qemu if p not in parents])
    if n > 1:
        total = sum(kids.values())
        print(f"{n} QEMU processes (not --pid), each on average:", file=out)
        for k, v in kids.most_common():
            print(f"  {k:45s} {v * per / n:8.0f} ms {100 * v / total:4.0f} %", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-F", type=int, default=1000, help="sampling frequency (Hz)")
    ap.add_argument("--pid", type=int, action="append", default=[], help="a QEMU to leave out of the sum")
    ap.add_argument("--script", help="classify this perf script output instead of recording")
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    if a.script:
        with open(a.script) as f:
            report(f, a.F, set(a.pid), sys.stdout)
        return
    if not a.command:
        ap.error("a command to run, or --script")
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        subprocess.run(["perf", "record", "-q", "-o", data, "-e", "cpu-clock", "-F", str(a.F), "-a",
                        "--call-graph", "dwarf,16384", "--"] + a.command, check=True)
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,time,ip,sym,dso"],
                                check=True, capture_output=True, text=True).stdout
    report(script.splitlines(), a.F, set(a.pid), sys.stdout)


if __name__ == "__main__":
    main()
