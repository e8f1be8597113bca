"""`ckinspect last-good RUN_DIR`: the newest checkpoint of a run that is whole, intact, safe and resumable.

The path alone on stdout and exit 0, so that a launch script can `--resume "$(ckinspect last-good runs/)"`;
exit 1 (and one line on stderr saying why) when no checkpoint qualifies. `--format json|markdown` lists
every checkpoint with its verdict and reasons; `sarif` carries the judged candidates' findings (code
scanning), `junit` a testcase per judged candidate that fails by the reasons it is no resume point. Every
format judges what the answer needs, at the plain answer's cost: newest first, each newer checkpoint that
failed, then the answer; the older ones are listed `not-judged`. `--all` judges every checkpoint. The
checkpoint about to be named has its CRCs and values read (NaN/Inf there: the next older one is tried);
`--verify` reads those of every checkpoint judged, `--quick` none (and says so on stderr). RUN_DIR may be
a URL prefix (`s3://bucket/run/`): listed once, each part read by range requests (io.folders, io.remote).
"""

from __future__ import annotations

import argparse
import sys

from ckinspect.api import judged_run
from ckinspect.commands.emit import emit, envelope, render_ci
from ckinspect.fmt import terminal_safe
from ckinspect.vocab import EXIT_FINDINGS, EXIT_OK


def run(args: argparse.Namespace) -> int:
    from ckinspect.jobs.parallel import checked_jobs

    jobs = checked_jobs(getattr(args, "jobs", None))
    quick = getattr(args, "quick", False)
    everything = getattr(args, "all", False)  # by default what the answer needs, whatever the format
    result = judged_run(args.run_dir, quick=quick, verify=args.verify, everything=everything, jobs=jobs)  # api
    best = result.last_good
    if quick and best is not None:
        print(f"ckinspect: --quick: structure only; the values of {terminal_safe(best.path.name)} were not read "
              "(it may hold NaN/Inf)", file=sys.stderr)  # fmt: skip
    if args.format == "json":
        import json

        emit(json.dumps(envelope("last-good", run=result.to_json()), indent=2), args.output)
    elif args.format == "markdown":
        from ckinspect.report.run_report import markdown_section

        emit("\n".join(["## ckinspect last-good", "", *markdown_section(result.to_json())]), args.output)
    elif args.format in ("sarif", "junit"):
        from ckinspect.report.subjects import from_runs

        emit(render_ci(args.format, from_runs([result], candidates=True), args, f"ckinspect last-good {result.path}"),
             args.output)  # fmt: skip
    elif best is not None:
        emit(str(best.path), args.output)  # the path as it is: a launch script passes it on
    if best is None:
        print(f"ckinspect: {why_none(result)}", file=sys.stderr)
        return EXIT_FINDINGS
    return EXIT_OK


def why_none(result) -> str:
    judged = [c for c in result.checkpoints if c.verdict]
    if not result.checkpoints:
        return f"no checkpoint found in {terminal_safe(str(result.path))}"
    newest = judged[-1] if judged else result.checkpoints[-1]
    reason = newest.reasons[0] if newest.reasons else newest.verdict
    return (f"no good checkpoint in {terminal_safe(str(result.path))} ({len(result.checkpoints)} found; the newest, "
            f"{terminal_safe(newest.path.name)}, is {newest.verdict}: {terminal_safe(reason)})")  # fmt: skip
