"""``hmmmerge baseline MODEL``: train and score one baseline world model.

The choices are the models of the registry :data:`hmmmerge.models.MODELS`;
training walks, fresh evaluation walks and seeds are those of
``hmmmerge evaluate`` (see that module).
"""

from __future__ import annotations

from ..models import MODELS
from .evaluate import add_experiment_arguments, protocol, run_models


def add_parser(sub) -> None:
    p = sub.add_parser("baseline", help="train and score one baseline model",
                       description="Train one baseline on random walks and score it on fresh walks: accuracy, "
                                   "surprise (nats per step), no-prediction share, states, wall time.")
    p.add_argument("model", choices=list(MODELS), help="which model: "
                   + "; ".join(f"{name}: {entry.summary}" for name, entry in MODELS.items()))
    add_experiment_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from ..cli import print_json
    from .env import world_from_args

    env = world_from_args(args)
    row = run_models(env, [args.model], args)[0]
    report = protocol(env, args)
    report.update(row)
    if args.json:
        print_json(report)
        return 0
    ci = row["surprise_ci"]
    print(f"{args.model}: trained on {args.episodes} episodes, scored on {args.eval_episodes} fresh episodes "
          f"(seed {args.seed})")
    print(f"  accuracy            {row['accuracy']:.4f}")
    print(f"  surprise            {row['surprise']:.4f} nats/step"
          + ("" if ci is None else f"  (95% CI {ci[0]:.4f} .. {ci[1]:.4f})")
          + (f"  smoothing {args.smoothing}" if args.smoothing else ""))
    print(f"  zero-prob steps     {row['zero_prob_steps']}")
    print(f"  no-prediction share {row['no_prediction_share']:.4f}")
    print(f"  states              {row['n_states']}")
    print(f"  wall time           {row['wall_s']:.3f} s")
    return 0
