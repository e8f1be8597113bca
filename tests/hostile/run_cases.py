"""Run every case of a built hostile corpus through one ckinspect command, in this process, under an
address-space limit (`RLIMIT_AS`), and write what each run answered to `<root>/results_<command>.json`.

    python -m tests.hostile.run_cases ROOT COMMAND [LIMIT_BYTES]

COMMAND: report | diff | repair | salvage | convert. The test (test_corpus.py) runs one process per
command, so each pays its imports once, and judges the results.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time
from pathlib import Path


def _run(argv: list[str]) -> dict:
    from ckinspect.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - recorded, judged by the test
            code = -1
            err.write(f"RAISED {type(exc).__name__}: {exc}")
    return {"argv": argv, "exit": code, "stdout": out.getvalue()[-20000:], "stderr": err.getvalue()[-4000:],
            "seconds": round(time.monotonic() - start, 2)}  # fmt: skip


def main() -> None:
    root, command = Path(sys.argv[1]), sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cases = json.loads((root / "cases.json").read_text())
    out_dir = root / "out"
    out_dir.mkdir(exist_ok=True)
    results = []
    for case in cases:
        folder = root / "cases" / case["name"]
        target = folder / case["target"] if case["target"] else folder
        runs = []
        if command == "report":
            runs.append(_run(["--report", str(target), "--format", "json"]))
            runs.append(_run(["--report", str(target)]))
            runs.append(_run(["--report", str(target), "--format", "markdown"]))
        elif command == "diff" and target.is_file():
            runs.append(_run(["diff", str(target), str(root / "benign.pt"), "--report"]))
        elif command == "repair":
            runs.append(_run(["repair", str(folder)]))
            runs.append(_run(["repair", str(folder), "--apply"]))
            runs.append(_run(["repair", str(folder), "--undo"]))
        elif command == "salvage" and target.is_file():
            runs.append(_run(["salvage", str(target), str(out_dir / f"{case['name']}.salvaged.pt")]))
        elif command == "convert" and target.is_file():
            runs.append(_run(["convert", str(target), str(out_dir / f"{case['name']}.safetensors")]))
        results.append({"case": case["name"], "runs": runs})
    (root / f"results_{command}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
