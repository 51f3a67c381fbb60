"""The benchmark's outputs: results.json, a Markdown report and a PNG chart of the ratios."""

from __future__ import annotations

import json
import os
import platform


def write(results: list[dict], out: str, *, smoke: bool, seconds: float, command: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"command": command, "smoke": smoke, "seconds": seconds, "machine": _machine(),
                   "results": results}, f, indent=2)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(_markdown(results, smoke, command))
    _chart(results, os.path.join(out, "chart.png"))


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _markdown(results: list[dict], smoke: bool, command: str) -> str:
    lines = [f"# spark-zmq benchmark ({'smoke' if smoke else 'full'})", "",
             f"`{command}` on {_machine()}.", "",
             "| scenario | unit | connector (median) | baselines (median) | ratio | target | connector runs |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if "median" not in r:
            continue
        baselines = "<br>".join(f"{k}: {v:,.0f} (ratio {r['ratios'][k]:.2f})"
                                for k, v in r["median"].items() if k != "connector")
        runs = r["runs"]["connector"]
        met = "" if r["target"] is None else (" (met)" if r["ratio"] >= r["target"] else " (missed)")
        lines.append(f"| {r['scenario']} | {r['unit']} | {r['median']['connector']:,.0f} | {baselines} | "
                     f"{r['ratio']:.2f} vs {r['versus']}{met} | {r['target'] or ''} | "
                     f"{min(runs):,.0f}..{max(runs):,.0f} |")
    for r in results:
        if r["scenario"] == "scaling":
            lines += ["", "Scaling (msgs/s by ingest channels): " +
                      ", ".join(f"{c}: {v:,.0f}" for c, v in r["channels"].items())]
        elif r["scenario"] == "latency":
            lines += ["", f"Latency at {r['rate']:,.0f} msgs/s (pull -> Spark -> push): p50 {r['p50_ms']:.0f} ms, "
                          f"p95 {r['p95_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms (targets 250 / - / 1000 ms); "
                          f"median micro-batch {r['batch_ms']:.0f} ms, against {r['rate_source_batch_ms']:.0f} ms "
                          f"for Spark's own rate source into noop at the same rate"]
        elif r["scenario"] == "backpressure":
            lines += ["", f"Backpressure: {r['messages']:,} messages ({r['payload_mb']:.0f} MiB) through a "
                          f"{r['max_spool_mb']:.0f} MiB spool: peak spool {r['peak_spool_mb']:.1f} MiB, receiver "
                          f"process RSS growth {r['rss_growth_mb']:.1f} MiB, lost {r['lost']}, {r['seconds']:.1f} s"]
    return "\n".join(lines) + "\n"


def _chart(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in results if "ratio" in r]
    fig, ax = plt.subplots(figsize=(8, 0.6 * max(len(ratios), 1) + 1.5))
    names = [f"{r['scenario']}\nvs {r['versus']}" for r in ratios]
    values = [r["ratio"] for r in ratios]
    colors = ["tab:green" if r["target"] and r["ratio"] >= r["target"] else "tab:orange" for r in ratios]
    ax.barh(names, values, color=colors)
    for i, r in enumerate(ratios):
        if r["target"]:
            ax.plot([r["target"]] * 2, [i - 0.4, i + 0.4], color="black", linewidth=2)
        ax.text(r["ratio"], i, f" {r['ratio']:.2f}", va="center")
    ax.set_xlabel("connector / baseline (higher is better; black mark = target)")
    ax.invert_yaxis()
    ax.set_title("spark-zmq vs baselines, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
