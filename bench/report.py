"""The benchmark's outputs: results.json, a Markdown report and a PNG chart of the ratios."""

from __future__ import annotations

import json
import os
import platform

import cpu


def write(results: list[dict], out: str, *, smoke: bool, seconds: float, command: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(
            {"command": command, "smoke": smoke, "seconds": seconds, "machine": _machine(), "results": results},
            f,
            indent=2,
        )
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(_markdown(results, smoke, command))
    _chart(results, os.path.join(out, "chart.png"))


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _markdown(results: list[dict], smoke: bool, command: str) -> str:
    lines = [
        f"# spark-zmq benchmark ({'smoke' if smoke else 'full'})",
        "",
        f"`{command}` on {_machine()}.",
        "",
        "| scenario | unit | connector (median) | baselines (median) | ratio | target | fair ceiling | "
        "connector runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "ratios" not in r:
            continue
        baselines = "<br>".join(
            f"{k}: {v:,.0f} (ratio {r['ratios'][k]:.2f})" for k, v in r["median"].items() if k != "connector"
        )
        runs = r["runs"]["connector"]
        met = "" if r["target"] is None else (" (met)" if r["ratio"] >= r["target"] else " (missed)")
        lines.append(
            f"| {r['scenario']} | {r['unit']} | {r['median']['connector']:,.0f} | {baselines} | "
            f"{r['ratio']:.2f} vs {r['versus']}{met} | {r['target'] or ''} | {_ceiling(r)} | "
            f"{min(runs):,.0f}..{max(runs):,.0f} |"
        )
    notes = [fixed_cost_line(r) for r in results if r.get("fixed_cost_s")]
    notes += [
        (curve_budget_line if r["scenario"].startswith("curve-") else budget_line)(r)
        for r in results
        if r.get("cpu_budget")
    ]
    notes += [roles_line(r) for r in results if r.get("cpu_budget", {}).get("by_role_us_per_msg")]
    skipped = next((r["wire_limit_skipped"] for r in results if r.get("wire_limit_skipped")), None)
    if skipped:
        notes.append(wire_line(skipped))
    library = next((r["wire_library"] for r in results if r.get("wire_library")), None)
    if library:
        notes.append(f"wire's limit (libzmq C local_thr/remote_thr): built against {library}")
    notes += [note for r in results for note in r.get("notes", [])]  # a scenario's own lines (peers)
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    for r in results:
        if r["scenario"] == "scaling" and "contenders" in r:
            lines += ["", *_scaling_table(r)]
        elif r["scenario"] == "scaling":  # results of before the contenders
            lines += [
                "",
                "Scaling (msgs/s by ingest channels): " + ", ".join(f"{c}: {v:,.0f}" for c, v in r["channels"].items()),
            ]
        elif r["scenario"] == "latency":
            lines += [
                "",
                f"Latency at {r['rate']:,.0f} msgs/s (pull -> Spark -> push): p50 {r['p50_ms']:.0f} ms, "
                f"p95 {r['p95_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms (targets 250 / - / 1000 ms); "
                f"median micro-batch {r['batch_ms']:.0f} ms, against {r['rate_source_batch_ms']:.0f} ms "
                f"for Spark's own rate source into noop at the same rate",
            ]
            floor = r.get("python_source_floor")
            if floor:
                ratio = r.get("p50_ratio", r["p50_ms"] / floor["p50_ms"])
                pairs = r.get("p50_ratios")
                runs = (
                    (
                        f" (the median of {len(pairs)} runs of each, alternately; each pair's ratio: "
                        + ", ".join(f"{x:.2f}" for x in pairs)
                        + ")"
                    )
                    if pairs and len(pairs) > 1
                    else ""
                )
                lines += [
                    "",
                    f"Python-source floor at the same rate (a Python source offering the same stamped rows "
                    f"by wall clock, same zmq sink and collector): p50 {floor['p50_ms']:.0f} ms, p95 "
                    f"{floor['p95_ms']:.0f} ms, p99 {floor['p99_ms']:.0f} ms, median micro-batch "
                    f"{floor['batch_ms']:.0f} ms; connector p50 / floor p50 {ratio:.2f}{runs} (target <= 1.2"
                    f"{', met' if ratio <= 1.2 else ', missed'})",
                ]
        elif r["scenario"] == "reqrep-broker-lru":
            m = r["median"]
            lines += [
                "",
                f"Load balancing, four workers, one 10x slower: spark-zmq broker {m['broker']:.2f} s, plain "
                f"round-robin {m['round-robin']:.2f} s; broker/round-robin {r['time_ratio']:.2f} "
                f"(target <= {r['target']})",
            ]
        elif r["scenario"] == "reqrep-latency":
            b, d = r["broker"], r["direct"]
            lines += [
                "",
                f"One request at a time: through the broker p50 {b['p50_ms']:.3f} ms, p99 {b['p99_ms']:.3f} ms;"
                f" direct REQ/REP p50 {d['p50_ms']:.3f} ms, p99 {d['p99_ms']:.3f} ms (p50 ratio "
                f"{r['p50_ratio']:.2f})",
            ]
        elif r["scenario"] == "pipeline" and r.get("latency"):
            lines += ["", pipeline_latency_line(r)]
        elif r["scenario"] == "relay-readers":
            m = r["median"]
            lines += [
                "",
                f"Two readers on one relay: {m['connector']:,.0f} and {m['second reader, same run']:,.0f} "
                f"rows/s, one reader alone {m['one reader alone']:,.0f} rows/s (ratios "
                f"{r['ratios']['one reader alone']:.2f} and "
                f"{m['second reader, same run'] / m['one reader alone']:.2f})",
            ]
        elif r["scenario"] == "backpressure":
            lines += [
                "",
                f"Backpressure: {r['messages']:,} messages ({r['payload_mb']:.0f} MiB) through a "
                f"{r['max_spool_mb']:.0f} MiB spool: peak spool {r['peak_spool_mb']:.1f} MiB, receiver "
                f"process RSS growth {r['rss_growth_mb']:.1f} MiB, lost {r['lost']}, {r['seconds']:.1f} s",
            ]
    return "\n".join(lines) + "\n"


def pipeline_latency_line(r: dict) -> str:
    """The pipeline's per-row latency, upstream write to downstream batch, with and
    without committedOnly, and what holding runs until their commit record costs."""
    lat = r["latency"]
    with_, without = lat["committedOnly"], lat["without committedOnly"]
    return (
        f"pipeline: latency at {lat['rate']:,.0f} msgs/s from the first stage's write to the second stage's "
        f"micro-batch: committedOnly p50 {with_['p50_ms']:.0f} ms, p99 {with_['p99_ms']:.0f} ms; without "
        f"p50 {without['p50_ms']:.0f} ms, p99 {without['p99_ms']:.0f} ms (with / without: p50 "
        f"{lat['p50_ratio']:.2f}, p99 {lat['p99_ratio']:.2f})"
    )


def fixed_cost_line(r: dict) -> str:
    """One egress scenario's fixed cost of a write (elapsed minus the receiving side's
    first-to-last window), the connector's first, then the other contenders'."""
    costs = r["fixed_cost_s"]
    main = next((k for k in costs if k.startswith("connector")), next(iter(costs)))
    c = costs[main]
    rows = f" ({c['rows']:,} rows)" if c["rows"] != c["messages"] else ""
    others = "; ".join(f"{k}: {v['median_s']:.3f} s" for k, v in costs.items() if k != main)
    return (
        f"{r['scenario']}: Spark's fixed cost of a write job: median {c['median_s']:.3f} s over "
        f"{c['messages']:,} messages{rows} ({main}; elapsed minus the consumer's first-to-last window, "
        f"not in the rate)"
        + (f"; same measure for {others}" if others else "")
        + (f"; consumer: {r['consumer']}" if r.get("consumer") else "")
    )


def _cores(b: dict) -> str:
    """A CPU budget's verdict: the cores the target needs against the machine's."""
    return (
        f"{b['cores_needed']:.2f} cores, {'more than' if b['cores_needed'] > b['cores'] else 'within'} this "
        f"machine's {b['cores']}"
    )


def roles_line(r: dict) -> str:
    """CPU a message by process for the connector and the in-memory sources (``cpu.ROLES``),
    as one line per contender: where each spends it, so the connector's own share and
    Spark's share of a connector row can be held against a plain Python source's."""
    lines = []
    for contender, roles in r["cpu_budget"].get("by_role_us_per_msg", {}).items():
        lines.append(f"{r['scenario']}: CPU us a message by process, {contender}: {cpu.roles_text(roles)}")
    return "\n".join(lines)


def c_wire_line(r: dict, fed: str, wire_name: str) -> str:
    """The connector fed by libzmq's C sender against libzmq's C receiver (the wire's limit)."""
    return (
        f"{r['scenario']}: the connector fed by libzmq's C sender (`thr remote`): {r['median'][fed]:,.0f} msgs/s, "
        f"{r['c_wire_ratio']:.2f} of libzmq's C receiver fed the same way ({wire_name}: "
        f"{r['median'][wire_name]:,.0f} msgs/s)"
    )


def budget_line(r: dict) -> str:
    """The one-row target against the machine's cores (``run.cpu_budget``), as one line."""
    b = r["cpu_budget"]
    parts = f"Spark's part {b['spark_us_per_msg']:.2f} us of CPU a message (the in-memory source's run)"
    if "c_sender_us_per_msg" in b:
        parts += (
            f" + libzmq's C sender {b['c_sender_us_per_msg']:.2f} + C receiver "
            f"{b['c_receiver_us_per_msg']:.2f} (local_thr/remote_thr's own CPU)"
        )
    return (
        f"{r['scenario']}: CPU budget of the target ({r['ceiling_target']} of the in-memory source, "
        f"{b['target_msgs_per_s']:,.0f} msgs/s): {parts} = {_cores(b)}, before any work of the connector's own; "
        f"that leaves "
        f"{b['left_for_connector_us_per_msg']:.2f} us a message for all of the connector's receive, spool and "
        f"read; the connector's run: {b['connector_us_per_msg']:.2f} us a message over every process but the "
        f"producer ({b['receiving_us_per_msg']:.2f} in the receiving process), the producer's own "
        f"{b['producer_us_per_msg']:.2f}; the in-memory source in the connector's micro-batches: "
        f"{b.get('paced_spark_us_per_msg', float('nan')):.2f}"
    )


def curve_budget_line(r: dict) -> str:
    """A CURVE egress target against the machine's cores (``run.curve_budget``), as one line."""
    b = r["cpu_budget"]
    return (
        f"{r['scenario']}: CPU budget of the target ({b['target']} of the connector without CURVE, "
        f"{b['target_per_s']:,.0f} {r['unit'].split('/')[0]}/s): the connector without CURVE "
        f"{b['without_curve_us_per_msg']:.2f} us of CPU a message (every process, the consumer's included) + "
        f"libzmq's own CURVE {b['libzmq_curve_us_per_msg']:.2f} (sealing and opening in C: the bare pyzmq PUSH "
        f"loop with CURVE less without, sender and consumer) = {_cores(b)}; the connector with CURVE: "
        f"{b['with_curve_us_per_msg']:.2f} us a message"
    )


def wire_line(reason: str) -> str:
    """The wire's limit's line when libzmq's C test could not run here."""
    return f"wire's limit (libzmq C local_thr/remote_thr): skipped: {reason}"


def _widths(r: dict) -> list[int]:
    return sorted({int(w) for widths in r["contenders"].values() for w in widths})


def _scaling_table(r: dict) -> list[str]:
    """Rows: where the receivers run; columns: channels (relays: relays of one channel)."""
    widths = _widths(r)
    lines = [
        f"Scaling: one-row ingest (raw, 100 B) into noop, {r.get('messages', 0):,} messages per run, median of "
        f"{r.get('reps', 1)}; msgs/s, then µs of CPU per message: receiving side / all processes "
        "(receiving: the relay processes; for threads the Python process that hosts the stream reader and its "
        "receiver threads; all: every process of the run but the producers, Spark's JVM and Python workers included)",
        "",
        "| receivers | " + " | ".join(f"{w} channel{'s' if w > 1 else ''}" for w in widths) + " |",
        "|---|" + "---|" * len(widths),
    ]
    for name, by_width in r["contenders"].items():
        by_width = {int(w): m for w, m in by_width.items()}
        unit = "relay" if name == "relays" else None
        cells = []
        for w in widths:
            m = by_width.get(w)
            cells.append(
                "-"
                if m is None
                else (f"{w} {unit}{'s' if w > 1 else ''}: " if unit else "")
                + f"{m['msgs_per_s']:,.0f} msgs/s<br>{m['receiving_us_per_msg']:.1f} / "
                f"{m['total_us_per_msg']:.1f} µs CPU/msg"
            )
        label = {
            "threads": "threads (receivers=threads)",
            "processes": "processes (receivers=processes)",
            "relays": "standalone relays (option relays)",
        }.get(name, name)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _chart(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in results if "ratio" in r]
    scaling = next((r for r in results if r["scenario"] == "scaling" and "contenders" in r), None)
    height = (0.6 * max(len(ratios), 1) + 1.5 if ratios or not scaling else 0) + (4 if scaling else 0)
    fig = plt.figure(figsize=(10 if scaling else 8, height))
    grid = fig.add_gridspec(
        2 if ratios and scaling else 1,
        2,
        height_ratios=[0.6 * max(len(ratios), 1) + 1.5, 4] if ratios and scaling else None,
    )
    if ratios or not scaling:
        _ratios(fig.add_subplot(grid[0, :]), ratios)
    if scaling:
        row = 1 if ratios else 0
        _scaling(fig.add_subplot(grid[row, 0]), fig.add_subplot(grid[row, 1]), scaling)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ceiling(r: dict) -> str:
    """The scenario's fair ceiling and the connector's ratio to it (results of earlier
    runs have none: their baseline stands in)."""
    name = r.get("ceiling", r["versus"])
    why = r.get("ceiling_why") or ""
    ratio, target = r.get("ceiling_ratio", r["ratio"]), r.get("ceiling_target")
    met = "" if target is None else f", target {target}{' met' if ratio >= target else ' missed'}"
    return f"{ratio:.2f} of {name}" + (f" ({why}{met})" if why or met else "")


def _ratios(ax, ratios: list[dict]) -> None:
    """Each scenario against its fair ceiling (``run.CEILINGS``), named on the bar; the
    target mark only where the target is set against that same baseline."""
    names = [f"{r['scenario']}\nvs {r.get('ceiling', r['versus'])}" for r in ratios]
    values = [r.get("ceiling_ratio", r["ratio"]) for r in ratios]
    on_target = [
        r.get("ceiling_target") or (r["target"] if r.get("ceiling", r["versus"]) == r["versus"] else None)
        for r in ratios
    ]
    colors = ["tab:green" if t and v >= t else ("tab:orange" if t else "tab:blue") for v, t in zip(values, on_target)]
    ax.barh(names, values, color=colors)
    for i, (value, target) in enumerate(zip(values, on_target)):
        if target:
            ax.plot([target] * 2, [i - 0.4, i + 0.4], color="black", linewidth=2)
        ax.text(value, i, f" {value:.2f}", va="center")
    ax.set_xlabel("connector / fair ceiling, higher is better (black: target; blue: target set elsewhere)")
    ax.invert_yaxis()
    ax.set_title("spark-zmq vs each scenario's fair ceiling, same run")


def _scaling(rate_ax, cpu_ax, r: dict) -> None:
    """Grouped bars by channels (relays: relays): msgs/s; CPU per message, all processes,
    with the receiving side's share drawn darker inside."""
    widths = _widths(r)
    names = list(r["contenders"])
    bar = 0.8 / len(names)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    for i, name in enumerate(names):
        by_width = {int(w): m for w, m in r["contenders"][name].items()}
        xs = [widths.index(w) + (i - (len(names) - 1) / 2) * bar for w in by_width]
        color = colors[i % len(colors)]
        rate_ax.bar(xs, [m["msgs_per_s"] for m in by_width.values()], bar, label=name, color=color)
        cpu_ax.bar(
            xs, [m["total_us_per_msg"] for m in by_width.values()], bar, color=color, alpha=0.45, label=f"{name}: all"
        )
        cpu_ax.bar(
            xs,
            [m["receiving_us_per_msg"] for m in by_width.values()],
            bar * 0.5,
            color=color,
            label=f"{name}: receiving",
        )
    for ax in (rate_ax, cpu_ax):
        ax.set_xticks(range(len(widths)), [str(w) for w in widths])
        ax.set_xlabel("channels (relays: relays of one channel)")
    rate_ax.set_ylabel("msgs/s")
    rate_ax.set_title("scaling: one-row ingest, 100 B")
    rate_ax.legend(fontsize="small")
    cpu_ax.set_ylabel("µs CPU per message")
    cpu_ax.set_title("CPU/msg (wide: all processes, narrow: receiving)")
    for ax in (rate_ax, cpu_ax):  # room for the legend above the bars
        ax.set_ylim(0, ax.get_ylim()[1] * 1.3)
    cpu_ax.legend(fontsize="x-small", ncol=3)
