"""``hmmmerge reproduce``: every figure of the paper, from scratch, resumable."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="regenerate every figure of the paper (PNG + CSV) and the final-values table",
        description="Run the paper's sweeps (Section 3.1 cluster analyses; Section 4: {random, sf, none} x "
                    "size {1, 10, 100} x 5 seeds x 3 colourings x 1,000 episodes) and write each figure as PNG "
                    "and CSV under --out, with the final values next to the paper's. Each run is saved as it "
                    "finishes (OUT/runs/); re-running skips finished runs.")
    p.add_argument("--quick", action="store_true", help="reduced seeds and episodes, same figures (under a minute)")
    p.add_argument("--out", default="hmmmerge-reproduce", metavar="DIR", help="output folder (default ./hmmmerge-reproduce)")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help="local (processes on all cores, default), local:N, threads:N, serial, or "
                        "dask://HOST:PORT (a running dask.distributed scheduler)")
    p.add_argument("--only", nargs="+", metavar="FIGURE", help="only these figures (names without 'fig:')")
    p.add_argument("--authors-sf", action="store_true",
                   help="learning curves with the authors' successor-feature weighting (gamma^l, eligible from "
                        "depth 4) instead of Algorithm 2's; use another --out")
    p.add_argument("--json", action="store_true", help="print one JSON object (table and file list)")
    p.add_argument("--progress", action="store_true", help="force the progress bar on stderr")
    p.set_defaults(run=run)


def run(args) -> int:
    import sys

    from ..cli import print_json
    from ..reproduce import FIGURES, reproduce
    from ..reproduce.figures import format_table
    from ..sweep import check_executor

    check_executor(args.executor)  # refused even when every run is done already
    if args.only:
        bad = [n.removeprefix("fig:") for n in args.only if n.removeprefix("fig:") not in FIGURES]
        if bad:
            raise ValueError(f"--only: unknown figure(s) {bad}; choose from {sorted(FIGURES)}")
    only = [n.removeprefix("fig:") for n in args.only] if args.only else None
    progress = False if args.json else (True if args.progress else sys.stderr.isatty())
    res = reproduce(args.out, quick=args.quick, executor=args.executor, progress=progress, only=only,
                    authors_sf=args.authors_sf)
    summary = {name: fig["summary"] for name, fig in res["figures"].items()}
    if args.json:
        print_json({"protocol": res["protocol"], "out": res["out"], "files": res["files"], "table": res["table"],
                    "figures": summary, "runs": res["runs"], "timing": res["timing"]})
        return 0
    runs = ", ".join(f"{k}: {v['ran']} ran, {v['skipped']} cached, {v['redone']} redone" for k, v in res["runs"].items())
    print(f"protocol {res['protocol']}; {runs}; {res['timing']['total_s']:.1f} s")
    if res["table"]:
        print(format_table(res["table"]))
    for name, s in summary.items():
        if s and name != "final_values":
            print(f"{name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in s.items()))
    print(f"{len(res['files'])} files under {res['out']}")
    return 0


def _fmt(v):
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} {_fmt(x)}" for k, x in v.items()) + "}"
    return f"{v:.3f}" if isinstance(v, float) else str(v)
