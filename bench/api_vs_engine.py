#!/usr/bin/env python3
"""RC WRITE through the public NDK API against the engine alone, in the same run (bench/README.md, issue #12).

A: `uroce-perf write_bw --in-process` on the embedded default config (`lcores: auto`): the application threads
   post through the NDK API's SQ and CQ rings from a core no engine polls, perftest's way.
B: `uroce_bench_rc`, one engine driving both QPs from inside its poll loop, with the same size, window and
   signalling: what the engine allows on this machine, with no API and no second core.

Interleaved A B A B, REPS times per size; medians, [min .. max], and the ratio A/B of each pair. Prints the CPU
(lscpu) with the figures. It never fails on a figure: it reports them, with the targets.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

# size: (perf iterations, perftest's window and signalling for that size, target ratio)
CASES = {
    64: (3_000_000, 128, 100, 0.5),
    65536: (60_000, 128, 1, 0.7),
}


def cpu_name():
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    return "%s (family %s, model %s), %d CPUs allowed" % (
        fields.get("Model name", "?"), fields.get("CPU family", "?"), fields.get("Model", "?"),
        len(os.sched_getaffinity(0)))


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("api_vs_engine: %s failed (%d):\n%s%s" % (" ".join(cmd), result.returncode, result.stdout,
                                                           result.stderr))
    return result.stdout


def through_api(build, size, iters):
    """Messages/s and payload Gb/s from perftest's table row for `size`."""
    out = run([os.path.join(build, "apps/perf/uroce-perf"), "write_bw", "--in-process", "-s", str(size), "-n",
               str(iters), "--report_gbits"])
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == str(size) and f[1] == str(iters):
            return float(f[4]) * 1e6, float(f[3])
    sys.exit("api_vs_engine: no result row in uroce-perf's output:\n" + out)


def engine_alone(build, size, window, signal, seconds):
    """Messages/s and payload Gb/s of uroce_bench_rc's uroce contender for one case, one repetition."""
    out = run([os.path.join(build, "bench/uroce_bench_rc"), "--case=%d:%d:%d" % (size, window, signal), "--reps=1",
               "--seconds=%g" % seconds, "--warmup=0.2"])
    m = re.search(r"rep 0\s+uroce\s+([\d.]+) Mmsg/s\s+([\d.]+) Gb/s", out)
    if not m:
        sys.exit("api_vs_engine: no sample in uroce_bench_rc's output:\n" + out)
    return float(m.group(1)) * 1e6, float(m.group(2))


def spread(values, fmt):
    return (fmt + " [" + fmt + " .. " + fmt + "]") % (statistics.median(values), min(values), max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build", nargs="?", default="build", help="the meson build directory (default: build)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="uroce_bench_rc's timed part per sample")
    p.add_argument("--sizes", default="64,65536", help="comma-separated, from: " + ",".join(map(str, CASES)))
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    for s in sizes:
        if s not in CASES:
            p.error("--sizes: %d is not one of %s" % (s, ",".join(map(str, CASES))))

    print("api_vs_engine: %s; load average %s; %d x A B per size" % (
        cpu_name(), " ".join("%.2f" % x for x in os.getloadavg()), a.reps))
    rows = []
    for size in sizes:
        iters, window, signal, target = CASES[size]
        api, engine, ratios = [], [], []
        for rep in range(a.reps):
            api.append(through_api(a.build, size, iters))
            engine.append(engine_alone(a.build, size, window, signal, a.seconds))
            ratios.append(api[-1][0] / engine[-1][0])
            print("  %6d B rep %d  API %8.3f Mmsg/s %7.2f Gb/s   engine alone %8.3f Mmsg/s %7.2f Gb/s   ratio %.3f" %
                  (size, rep, api[-1][0] / 1e6, api[-1][1], engine[-1][0] / 1e6, engine[-1][1], ratios[-1]),
                  flush=True)
        rows.append((size, window, signal, api, engine, ratios, target))

    print("\nmedian [min .. max] of %d; window %s; Gb/s is payload (10^9 bit/s)" % (a.reps, "and signalling as "
                                                                                   "perftest's defaults"))
    print("%-28s | %-28s | %-8s | %-28s | %-8s | %-24s | target" % (
        "case", "API Mmsg/s", "API Gb/s", "engine alone Mmsg/s", "Gb/s", "API/engine"))
    for size, window, signal, api, engine, ratios, target in rows:
        ratio = statistics.median(ratios)
        print("%-28s | %-28s | %8.2f | %-28s | %8.2f | %-24s | >= %.1f %s" % (
            "%d B win %d sig 1/%d" % (size, window, signal), spread([x[0] / 1e6 for x in api], "%7.3f"),
            statistics.median(x[1] for x in api), spread([x[0] / 1e6 for x in engine], "%7.3f"),
            statistics.median(x[1] for x in engine), spread(ratios, "%.3f"), target,
            "met" if ratio >= target else "NOT met"))


if __name__ == "__main__":
    main()
