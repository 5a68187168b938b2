"""The report's sections on operating smr (``bench/report.py`` renders them): the Python
client, keys, dedup memory, the soak with faults and the fuzzed decoders."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt_fine_ms, fmt_machine, fmt_ms, fmt_n, fmt_ratio, fmt_spread


def client_section(report: dict[str, Any] | None) -> list[str]:
    """``smr.connect`` (``bench/client.py``): a program's writes against ``smr feed``, its
    reads during a feed and idle, and the scan rate."""
    lines = ["## The Python client", ""]
    if report is None:
        return [*lines, "Not run (`python bench/client.py`).", ""]
    config, how = report["config"], report["how"]
    lines += [
        f"{config['nodes']} nodes, r = {config['replication']}, {fmt_n(config['words'])} words, "
        f"medians of {config['runs']} runs (min-max). Writers: {how['writers']}. Reads: "
        f"{how['reads']}; the load is {config['load_fraction']:.0%} of the program's rate "
        f"without combine ({fmt_n(config['load_words_per_s'])} words/s), "
        f"`get_many` of {config['get_many_keys']} keys. Machine: {fmt_machine(report)}.",
        "",
        "| writes | `smr feed` | `emit_many` | `emit_many` / `smr feed` |",
        "|---|---|---|---|",
    ]
    for mode, entry in report["writers"].items():
        lines.append(
            f"| {mode.replace('_', ' ')} | {fmt_spread(entry['feed_words_per_s'])} words/s | "
            f"{fmt_spread(entry['program_words_per_s'])} words/s | "
            f"{fmt_ratio(entry['program_over_feed'])} |"
        )
    summary = report["reads"]["summary"]
    lines += ["", "| read | p50 | p99 |", "|---|---|---|"]
    for name, label in (
        ("get_loaded_ms", "`get`, during the feed"),
        ("get_idle_ms", "`get`, idle"),
        ("get_many_loaded_ms", "`get_many`, during the feed"),
        ("get_many_idle_ms", "`get_many`, idle"),
    ):
        cells = " | ".join(fmt_fine_ms(summary[name][q]) for q in ("p50", "p99"))
        lines.append(f"| {label} | {cells} |")
    lines += ["", f"`scan`: {fmt_spread(summary['scan_keys_per_s'])} keys/s.", ""]
    return lines


def security_section(report: dict[str, Any] | None) -> list[str]:
    """What CurveZMQ keys cost (``bench/security.py``): ``smr feed`` into a cluster with keys
    against one started ``--insecure``, in one run."""
    lines = ["## Keys (CurveZMQ)", ""]
    if report is None:
        return [*lines, "Not run (`python bench/security.py`).", ""]
    lines += [
        f"`smr feed` of {fmt_n(report['words'])} words (ten to a line) as a fresh process into a "
        f"fresh cluster of {report['nodes']} nodes, r = {report['replication']}, with keys "
        "(the default: every socket encrypted and authenticated, CurveZMQ) and started "
        f"`--insecure`, alternating; medians of {report['runs']} runs (min-max), every run's "
        f"counts checked against plain Python. Machine: {fmt_machine(report)}.",
        "",
        "| feed | with keys | `--insecure` | keys / insecure | with keys, an outsider "
        "knocking | knocking / keys | counts exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, entry in report["modes"].items():
        lines.append(
            f"| {mode.replace('_', ' ')} | {fmt_spread(entry['keys_words_per_s'])} words/s | "
            f"{fmt_spread(entry['insecure_words_per_s'])} words/s | "
            f"{fmt_ratio(entry['keys_over_insecure'])} | "
            f"{fmt_spread(entry['outsider_words_per_s'])} words/s | "
            f"{fmt_ratio(entry['outsider_over_keys'])} | {'yes' if entry['exact'] else 'NO'} |"
        )
    lines += [
        "",
        "The outsider knows the cluster's public key but holds no accepted client key: twenty "
        "times a second it opens a new connection to every node, each refused at the "
        "handshake (about "
        f"{fmt_n(report['modes']['no_combine']['outsider_attempts']['median'])} attempts per "
        "run), on the same two cores as the cluster and the feeder.",
    ]
    return [*lines, ""]


def hwm_growth_section(report: dict[str, Any] | None) -> list[str]:
    """Dedup memory against short feeds (``bench/hwm_growth.py``)."""
    lines = ["## Dedup memory against short feeds", ""]
    if report is None or "runs" not in report:
        return [*lines, "Not run (`python bench/hwm_growth.py`).", ""]
    kept, retired = report["runs"]["kept"], report["runs"]["retired"]
    lines += [
        f"Short feeds in a row into {report['nodes']} nodes, r = {report['replication']}, "
        f"each a new connection (a new mapper id) writing {report['words_per_feed']} words "
        "of the books; the nodes' `hwm_entries` and RSS, summed. Measured in one run: ids the "
        "program names, which never say they finished (their hwms stay), against ids of the "
        f"connections' own, which do and are retired after a lease of "
        f"{report['mapper_lease_s']:g} s (the last row is read one lease after the last "
        f"feed). Machine: {fmt_machine(report)}.",
        "",
        "| feeds | after feeds | hwm entries | RSS of the nodes |",
        "|---|---|---|---|",
    ]
    for name, run in (("never finished", kept), ("finished, retired", retired)):
        samples = run["samples"]
        for sample in (samples[1], samples[len(samples) // 2], samples[-1]):
            lines.append(
                f"| {name} | {sample['feeds']:,} | {sample['hwm_entries']:,} | "
                f"{sample['rss_bytes'] / 2**20:.0f} MiB |"
            )

    def per_feed_kib(run: dict[str, Any]) -> float:
        first, last = run["samples"][1], run["samples"][-1]
        return (last["rss_bytes"] - first["rss_bytes"]) / 1024 / (last["feeds"] - first["feeds"])

    most = max(sample["hwm_entries"] for sample in retired["samples"])
    lines += [
        "",
        f"Never finished: {kept['hwm_entries_per_feed']:.0f} hwm entries and "
        f"{per_feed_kib(kept):.1f} KiB of RSS per feed, RSS {kept['rss_growth']:+.0%} over "
        f"{kept['feeds']:,} feeds. Finished: at most {most:,} hwm entries (the feeds whose "
        f"lease runs), {retired['samples'][-1]['hwm_entries']:,} one lease after the last; "
        f"{per_feed_kib(retired):.1f} KiB of RSS per feed (one entry in each store it wrote to, "
        f"across the 3 nodes), RSS {retired['rss_growth']:+.1%} over {retired['feeds']:,} "
        "feeds. Counts exact: "
        f"{'yes' if kept['check']['exact'] and retired['check']['exact'] else 'NO'}.",
        "",
    ]
    return lines


def restore_section(report: dict[str, Any] | None) -> list[str]:
    """Restart from disk (``bench/restore.py``)."""
    lines = ["## Restart from disk", ""]
    if report is None:
        return [*lines, "Not run (`python bench/restore.py`).", ""]
    lines += [
        f"A local cluster of {report['nodes']} nodes, r = {report['replication']}, keeping its "
        "state on disk (`--data-dir`), fed that many distinct keys once each, then `smr "
        "cluster down` and `smr cluster up` on the same directory: the seconds until every "
        "node answers again with its state (each node restores before it listens), and the "
        "longest restore of one node. Baseline, measured in the same run: an empty cluster's "
        "`up` plus feeding the same keys again. Every count checked after the restart. "
        f"Machine: {fmt_machine(report)}.",
        "",
        "| keys | restart from disk | longest node restore | on disk per node | "
        "empty cluster + feed again | ratio | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        on_disk = max(
            (node["snapshot_bytes"] or 0) + (node["log_bytes"] or 0)
            for node in run["nodes"].values()
        )
        baseline_s = run["baseline_up_s"] + run["baseline_feed_s"]
        lines.append(
            f"| {run['keys']:,} | {run['restart_up_s']:.2f} s | {run['restore_s_max']:.2f} s | "
            f"{on_disk / 2**20:.1f} MiB | {baseline_s:.2f} s | {fmt_ratio(run['ratio'])} | "
            f"{'yes' if run['check']['exact'] else 'NO'} |"
        )
    return [*lines, ""]


def soak_faults_section(report: dict[str, Any] | None) -> list[str]:
    """The soak with faults (``bench/soak.py --fault-every-s``): the ring's memory over a long
    full-rate feed that loses and gains a node every period, and the exact counts."""
    lines = ["## Soak with faults", ""]
    if report is None:
        return [
            *lines,
            "Not run (`python bench/soak.py --seconds 600 --fault-every-s 60 --out "
            "bench/results/soak_faults.json`).",
            "",
        ]
    faults = report["faults"]
    kills = [e for e in faults["events"] if e["event"] == "kill"]
    joins = [e for e in faults["events"] if e["event"] == "join"]
    joined = [e for e in joins if e["exit"] == 0]
    first, last = faults["ring_rss"][0], faults["ring_rss"][-1]
    lines += [
        f"{report['nodes_count']} nodes, r = {report['replication']}, one feeder looping over "
        f"the books at full speed (no combine) for {report['seconds']:.0f} s: "
        f"{fmt_n(report['feed']['tuples'])} tuples, {fmt_n(report['tuples_per_s'])} tuples/s. "
        "Every "
        f"{faults['every_s']:.0f} s a serving node is SIGKILLed (once every slot has its "
        "copies again) and `smr scale out` joins a new node beside the busiest: "
        f"{len(kills)} kills, {len(joined)} of {len(joins)} joins done. "
        f"Machine: {fmt_machine(report)}.",
        "",
        "| | |",
        "|---|---|",
        f"| the ring's RSS before the first kill | {first['rss_bytes'] / 2**20:.0f} MiB "
        f"({first['nodes']} nodes) |",
        f"| the ring's RSS before the last kill | {last['rss_bytes'] / 2**20:.0f} MiB "
        f"({last['nodes']} nodes) |",
        f"| growth | {faults['ring_rss_growth']:+.1%} |",
        f"| counts exact against plain Python | {'yes' if faults['check']['exact'] else 'NO'} |",
        "",
    ]
    return lines


def fuzz_section(report: dict[str, Any] | None) -> list[str]:
    """The decoders' fuzzer (``bench/fuzz_decoders.py``): cases per decoder and outcome."""
    lines = ["## Decoders under fuzzing", ""]
    if report is None:
        return [*lines, "Not run (`python bench/fuzz_decoders.py`).", ""]
    lines += [
        f"{report['cases']:,} generated and mutated inputs (seed {report['seed']}) in "
        f"{report['elapsed_s']:.0f} s; peak RSS {report['peak_rss_kib_before'] / 1024:.0f} MiB "
        f"before, {report['peak_rss_kib_after'] / 1024:.0f} MiB after. Refused means the "
        "decoder's declared error (FrameError, DeltaError); failed, anything else. "
        f"Machine: {fmt_machine(report)}.",
        "",
        "| decoder | accepted | refused | failed |",
        "|---|---|---|---|",
    ]
    for name, outcome in report["outcomes"].items():
        lines.append(
            f"| {name} | {outcome['accepted']:,} | {outcome['refused']:,} | {outcome['failed']:,} |"
        )
    return [*lines, ""]


def output_table_section(report: dict[str, Any] | None) -> list[str]:
    """Exactly-once output to PostgreSQL (``bench/output_table.py``): the feed's rate with the
    table against files only, how soon the table holds everything, and the checks."""
    lines = ["## Output to PostgreSQL", ""]
    if report is None:
        return [*lines, "Not run (`python bench/output_table.py`).", ""]
    runs = len(report["runs"]) // max(1, len(report["summary"]))
    lines += [
        f"A local cluster of {report['nodes']} nodes, r = {report['replication']}, fed "
        f"{fmt_n(report['words'])} words by `smr feed` with a job that emits a record per "
        "tuple: output files only (the baseline, in the same run), then a PostgreSQL table "
        "as well, summing (`add`) or keeping the last (`replace`). The server runs on the "
        "same two cores as the nodes and the feeder, fsync on. Medians of "
        f"{runs} runs (min-max); settle: from the feed's end until the table equals plain "
        "Python's counts; commit: the nodes' time per commit, on their sink threads. Every "
        f"run's state, table and files read each origin once checked exact. Machine: "
        f"{fmt_machine(report)}.",
        "",
        "| output | words/s | vs files only | settle | commit | exact |",
        "|---|---|---|---|---|---|",
    ]
    for name, entry in report["summary"].items():
        settle = "-" if entry["settle_s"]["median"] is None else fmt_spread(entry["settle_s"], " s")
        commit = (
            "-"
            if entry["commit_ms_per_commit"]["median"] is None
            else fmt_spread(entry["commit_ms_per_commit"], " ms")
        )
        lines.append(
            f"| {name} | {fmt_spread(entry['words_per_s'])} | "
            f"{fmt_ratio(entry['ratio_to_files'])} | {settle} | {commit} | "
            f"{'yes' if entry['exact'] else 'NO'} |"
        )
    return [*lines, ""]


def nexmark_section(report: dict[str, Any] | None) -> list[str]:
    """Nexmark Q5 and Q7 (``bench/nexmark.py``): smr on a local cluster (and in-process)
    against Spark Structured Streaming over the same files, windows compared; events/s and
    each window's end to its result when paced."""
    lines = ["## Nexmark Q5 and Q7", ""]
    if report is None:
        return [*lines, "Not run (`python bench/nexmark.py`).", ""]
    if "cluster" not in report["config"]:
        return [
            *lines,
            "Rerun `python bench/nexmark.py`: the results predate its cluster mode.",
            "",
        ]
    return [*lines, *_nexmark_throughput(report), *_nexmark_latency(report)]


def _nexmark_throughput(report: dict[str, Any]) -> list[str]:
    config, cluster = report["config"], report["config"]["cluster"]
    lines = [
        f"{report.get('date', 'Undated')}: {fmt_n(config['events'])} Nexmark events (seed "
        f"{config['seed']}, {config['files']} files), medians of {config['repeats']} runs "
        f"(min-max). **smr cluster**: {cluster['nodes']} node processes on 127.0.0.1, r = "
        f"{cluster['replication']}, {2 ** cluster['slot_bits']} slots, checkpoint every "
        f"{cluster['checkpoint_interval_ms']} ms, a fresh cluster per run (already up when "
        "timed), the events read from the files and sent through `smr.connect(job=...)` with "
        "their event time, timed to the last window's result read from the output. "
        "**in-process**: `smr.testing.run_job`, no node, no network. **Spark**: Structured "
        "Streaming, `availableNow`, update mode, state in the default store; its best "
        "`maxFilesPerTrigger` shown. Q5's second stage (the most bids per window) is "
        "`examples.nexmark.hottest` over the first stage's windows read from the output "
        f"(the ring runs one job), checked too. Machine: {fmt_machine(report)}.",
        "",
        "| query | windows | equal (cluster, in-process, Spark, plain Python) | smr cluster "
        "events/s | smr in-process | Spark events/s (best) | cluster / Spark | in-process / "
        "Spark |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, query in report["queries"].items():
        spark = query["spark"]["by_max_files_per_trigger"][query["spark"]["best"]]
        lines.append(
            f"| {name.upper()} | {fmt_n(query['windows'])} | "
            f"{'yes' if query['equal_windows'] else '**no**'} | "
            f"{fmt_spread(query['smr']['events_per_s'])} | "
            f"{fmt_spread(query['smr_in_process']['events_per_s'])} | "
            f"{fmt_spread(spark['events_per_s'])} ({query['spark']['best']} files a batch) | "
            f"{fmt_ratio(query['ratio_smr_to_spark_best'])} | "
            f"{fmt_ratio(query['ratio_in_process_to_spark_best'])} |"
        )
    return [*lines, ""]


def _nexmark_latency(report: dict[str, Any]) -> list[str]:
    config, paced = report["config"], report["config"]["paced"]
    wall_rate = paced["events_per_second"] * config["speedup"]
    lines = [
        f"Latency: {fmt_n(paced['events'])} events at {fmt_n(paced['events_per_second'])} a "
        f"second of event time, sent in real time {config['speedup']:g}x faster "
        f"({fmt_n(wall_rate)} events/s) to a fresh cluster checkpointing every "
        f"{paced['checkpoint_interval_ms']} ms (windows close in that cycle). **smr**: per "
        "window, from the send of the first bid at or past its end (the tuple that lets the "
        "watermark reach its last instant) to its result read from the output file (polled "
        "every 2 ms); windows no later event passed close at the feed's end and are not "
        "timed. **Spark**: the same events in files of "
        f"{config['spark_trigger_ms']} ms of wall time, one a batch; the figure is that "
        "trigger interval plus each batch's own time (`triggerExecution` in its progress "
        "reports): what a result waits with a processing-time trigger of that interval when "
        "its window's end arrives just after a trigger (a batch longer than the interval "
        "delays the next one further); a final result in append mode would wait one batch "
        f"more. Load average after the run: {report['machine'].get('loadavg_after', '-')}.",
        "",
        "| query | windows timed (ends) | at the feed's end | smr p50 | smr p99 | smr max "
        "| Spark batch p50 | Spark p50 | Spark p99 | equal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, query in report["queries"].items():
        latency = query["latency"]
        smr, spark = latency["smr"], latency["spark"]
        lines.append(
            f"| {name.upper()} | {fmt_n(smr['latency_ms']['count'])} ({smr['window_ends']}) | "
            f"{fmt_n(smr['closed_at_finish'])} | {fmt_ms(smr['latency_ms']['p50'])} | "
            f"{fmt_ms(smr['latency_ms']['p99'])} | {fmt_ms(smr['latency_ms']['max'])} | "
            f"{fmt_ms(spark['batch_ms']['p50'])} | {fmt_ms(spark['latency_ms']['p50'])} | "
            f"{fmt_ms(spark['latency_ms']['p99'])} | "
            f"{'yes' if latency['equal_windows'] else '**no**'} |"
        )
    return [*lines, ""]


STARTUP_TARGETS_S = {"import smr": 0.15, "smr --version": 0.2, "smr cluster up (2 nodes)": 1.0}


def startup_section(report: dict[str, Any] | None) -> list[str]:
    """Start-up (``bench/startup.py``): each command's median wall time, this tree against a
    baseline revision's source in the same run, alternating."""
    lines = ["## Start-up", ""]
    if report is None:
        return [*lines, "Not run (`python bench/startup.py`).", ""]
    lines += [
        f"Median wall time of {report['repeat']} rounds, this tree against the source of "
        f"{report['baseline_revision'][:7]} in the same run, alternating; CPU time (the "
        f"command and its children) in brackets. Machine: {fmt_machine(report)}.",
        "",
        "| command | baseline | this tree | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for name, this in report["this"].items():
        before = report["baseline"][name]
        target = STARTUP_TARGETS_S.get(name)
        lines.append(
            f"| `{name}` | {before['wall_s']:.3f} s ({before['cpu_s']:.3f} s) | "
            f"{this['wall_s']:.3f} s ({this['cpu_s']:.3f} s) | "
            f"{fmt_ratio(this['wall_s'] / before['wall_s'])} | "
            f"{'-' if target is None else f'{target} s'} |"
        )
    return [*lines, ""]
