"""Sleep replay: level 2 as a clone HMM re-estimated at every sleep by stepwise EM (``merge="replay"``).

Level 2 is a clone-structured HMM (the model of :class:`~hmmmerge.baselines.em.CloneHMM`):
every observation owns ``n_clones`` hidden clones that emit it and nothing
else, and ``T[a, i, j] = P(clone j | clone i, action a)``.  The clusters are
the clones that hold level-1 states: C connects every level-1 state to its
most probable clone given the episode up to it (the forward filter).

What a sleep does (:meth:`ReplayMerger.sleep`):

* the episodes lived since the last sleep and ``replay`` episodes drawn at
  random from the last ``window`` ones (level 1 stores every episode; this
  merger keeps their (action, observation) sequences) form a batch; an episode is
  drawn in proportion to the rarity of the places (blocks of clones) it passes
  through (``priority=True``, the default; :meth:`ReplayMerger._replay_priority`),
  so that rarely visited places are re-estimated under the current model before
  stepwise EM forgets them, and the start counts come from the new episodes;
* ``n_iter`` EM iterations on the batch (by default more on small models, see
  :data:`ITER_BUDGET`), warm-started from the current
  model: an E-step (forward-backward on the clone blocks, the numba kernels of
  :mod:`hmmmerge.baselines._em_kernels`) gives the batch's expected counts per
  episode ``s``; the kept statistics move towards them,
  ``S <- (1 - eta) S + eta s`` with ``eta = (u + 2) ** -step_exponent`` at the
  ``u``-th update (stepwise EM, Liang & Klein 2009; old evidence is forgotten
  geometrically); the M-step normalises ``window * S + pseudocount``;
* slipping moves: ``T_a = (1 - e) Q_a + e mean_b Q_b`` (the recorded action
  made the move with ``1 - e``, a uniformly random one with ``e``); the E-step's
  counts of the recorded action are split by Bayes' rule between the actions
  that could have made each move, ``S`` keeps counts of the action made, and
  ``e`` is the kept share of slipped moves (:func:`~hmmmerge._replay_kernels.absorb_counts`;
  with ``slip_floor`` (the default) at least the share the recorded moves show, capped at the initial ``slip``,
  :func:`slip_share_floor`: EM alone lets the free rows of ``Q`` absorb the slips and ``e`` fall to 0);
* local optima: a clone that stands for two places of one view (the visits
  that came in one way are followed by other views than those that came in
  another way) is split in two, into a spare clone of its view
  (:meth:`ReplayMerger._split`); stepwise EM alone never leaves such an optimum;
* the level-1 states of the batch are connected to their most probable clone.

A sleep's work is ``n_iter`` passes over the new and the ``replay`` replayed
steps and over the clone blocks of the registered pairs of views seen in sequence
(``T`` is zero between the others): it does not grow with the life.  Pairs are
registered at sleeps, and a pair whose kept counts have faded to the pseudocount
(:data:`PAIR_FLOOR`; the pairs that only random views made) is dropped
(:meth:`ReplayMerger._drop_faded_pairs`).  A sleep with fewer than ``min_new`` new episodes is postponed; a
model of few views with many clones each sleeps half as often with twice the replayed episodes, and reads
views as noise at every 4th sleep only while its views look clean (:data:`SLOW_SLEEP_CLONES`,
:data:`NOISE_SKIP_RATE`), as does a model of more than 400 clones with at least 10 per view
(:data:`NOISE_SKIP_CLONES`).
Between sleeps, :meth:`ReplayMerger.place` records each chunk of steps and
connects its level-1 states to their filtered clone, so level 2 follows the
current episode.  The agent's online predictors use ``T`` restricted to the
clusters with transitions below ``prune`` dropped (:meth:`level2_transitions`), and on big models their beliefs
drop the clusters below :data:`ONLINE_BELIEF_CUT` of the belief (nothing the model reads);
:meth:`level2_hmm` is the unpruned model on the clusters.

The exact phase (``exact=True``, the default): while the episodes lived so far are consistent with a
deterministic world seen from one start -- every episode starts with the same view, and no two episodes
that took the same actions from the start saw different views after them (a contradiction is a level-1
state created where level 1 already had a link under the same action, :meth:`ReplayMerger.place`) --
level 2 is the exact fold's (:class:`~hmmmerge.fold.FoldMerger`, ``merge="fold"``: exact folds are
unbeatable on clean data). The phase ends for good at the first such proof, or when the fold's work
(:data:`EXACT_WORK_BASE`, :data:`EXACT_WORK_PER_STEP`: a count, not a time) outgrows its budget (the fold
of a heavily aliased world, MiniGrid's 3x3 view; later, a sleep's priced work over :data:`EXACT_LATE_PRICE_PER_STEP`
per step lived since the fold's last sleep: slips that make no contradiction); stepwise EM then learns from the buffered episodes at
its first sleep (:meth:`ReplayMerger.sleep`) and goes on as above.

Why this learner: EM on clone HMMs is robust to slips, noise and random
starts; replayed at sleeps it is online and its cost per sleep is bounded
(measurements: BENCHMARKS.md, "The world as it is: sleep replay").

>>> from hmmmerge import gridworld, random_walk
>>> from hmmmerge.agent import TwoLevelMemory
>>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 40, seed=0))
>>> agent.level2_hmm().n_states == agent.n_clusters_ > 0
True
"""

from __future__ import annotations

import numpy as np

from ._estimator import Estimator
from ._validation import Bool, Float, Int, Options

__all__ = ["ReplayMerger", "allocate_clones"]

_PREFIX = "replay_"
#: views after a step that weigh whether its view was a random one (see ReplayMerger._views_read_as_noise)
NOISE_HORIZON = 3
#: the largest rate of random views the estimate may reach (above it the evidence is the model's own
#: ignorance: on an unlearned model the fixed point runs away towards 1, every view read as noise)
NOISE_MAX = 0.2
#: updates before a view read as noise is replaced (about 200 episodes: a young model's surprises are not noise)
NOISE_AFTER = 20
#: visits (weighted, see SPLIT_MEMORY) a clone needs before the split test is made on it
SPLIT_MIN_VISITS = 20
#: the weight of the split evidence of earlier sleeps is multiplied by this at every sleep
SPLIT_MEMORY = 0.5
#: ``priority=True``: a step of a replayed episode weighs ``1 / (v + PRIORITY_FLOOR * mean v)``, ``v`` the expected
#: visits of its clone's block and ``mean v`` that of a clone holding level-1 states: at most 1 / PRIORITY_FLOOR
#: times a step through a clone of mean visits (see ReplayMerger._replay_priority)
PRIORITY_FLOOR = 0.1
#: clones in all above which the default ``n_clones`` shrinks (to at least 20 per observation, 5 beyond 100)
CLONE_BUDGET = 600
#: ``alloc="visits"``: the most and the fewest clones a view seen before the first sleep gets (the cap is the
#: even layout's count up to CLONE_BUDGET // 30 = 20 views, so such worlds keep the even layout)
CLONE_CAP, CLONE_FLOOR = 30, 1
#: ``n_clones=None``: a model of at most FEW_VIEWS views gets FEW_VIEW_CLONES clones per view instead of 30 (and
#: still sleeps deeply, see DEEP_MAX_CLONES). The 3-colour torus has 27 places per view: with 30 clones stepwise EM
#: stops in merged places under noise, slips and random starts; with 45 and deep sleeps it met every bound on all
#: 10 benchmark runs measured (+0.015 / +0.047 with noise, +0.026 / +0.007 with slip 0.10), for +1 s. With 4 views
#: (the 4-colour grid, 25 places per view) more clones lost 0.004-0.009, with 6 or 8 they helped the torus and not
#: the grid: BENCHMARKS.md, "Few-colour worlds: the oracle gap under noise, slips and random starts, session 13"
FEW_VIEWS, FEW_VIEW_CLONES = 3, 45
#: ``n_clones=None``, random starts (more than LONG_MEMORY_START_SHARE of the buffered episodes start with another
#: view than the most common first one) on a model of deep sleeps that is not of FEW_VIEWS views (4 views x 30),
#: after GROW_AFTER stepwise updates (40 sleeps of 6 iterations: about 400 episodes): a view with a clone that
#: passed the split test and found no spare (:meth:`ReplayMerger._spare`: no unused clone, no duplicate) gets
#: ``max(GROW_STEP, such clones)`` clones more, up to GROW_VIEW_CAP (:meth:`ReplayMerger._grow`; the new clones are
#: spares for the next splits; the size gates keep the even layout's regime, ITER_BUDGET and DEEP_BUDGET divide by
#: the clones grown). The 4-colour 14x14 grid (49 places per view on 30 clones) from random starts: 0.733 / 0.771
#: -> 0.773 / 0.810 (EM 0.783 / 0.790). The signal alone also fires on the 4-colour 10x10 grid (25 places per view),
#: but only while the model is young (its last spare-less split at update 186-210 on 5 lives, then none to 1,000
#: episodes; the 14x14 grid's go on to the end): grown from the start there it lost 0.005 / 0.001 and 0.3-0.8 s,
#: with the gate it is unchanged. Without the gate the 14x14 grid gained more (0.792 / 0.827; 45 per view 0.826 /
#: 0.858 for about +2 s). Fit CPU side by side within load noise (+0.4 s on s0, -0.3 s on s1). Under noise and
#: slips from the fixed start growing gained nothing and lost up to 0.018 (slip 0.10 s0: a new EM miss), hence
#: random starts only (BENCHMARKS.md, "Few-view worlds, session 15")
GROW_VIEW_CAP, GROW_STEP, GROW_AFTER = 40, 10, 240
#: ``alloc="visits"`` on a world of more than ALLOC_MANY_VIEWS views (the even layout's 5 clones per view, EM's):
#: the first sleep of stepwise EM waits until its new episodes hold ALLOC_STEPS x ``H`` steps, the clones are
#: shared by the visits of all of them, and the seen views share ALLOC_MEAN clones per view on average instead
#: of 5. On MiniGrid FourRooms from random poses (1,040 poses; 7x7 view: 343 views, 232 of one pose, one of 64)
#: the first sleep's 10 episodes saw most poses about once: clones went by chance (0.899 against EM's 0.912);
#: with 4 x H steps the clones follow the poses, and 3 per view hold them at lower cost (BENCHMARKS.md,
#: "MiniGrid's many views, session 13")
ALLOC_MANY_VIEWS, ALLOC_STEPS, ALLOC_MEAN = 100, 4, 3
#: ``n_clones=None`` on a world of 31-100 views: CLONE_BUDGET clones in all (at least BUDGET_FLOOR per view)
#: instead of 20 per view (40 views made 800 clones, 60 views 1,200: fit 7-17 s per 1,000 episodes), in the even
#: layout (``alloc="visits"`` keeps it from ALLOC_EVEN_VIEWS views to ALLOC_MANY_VIEWS): a first sleep's
#: sample from fixed starts is local and starved far views of clones (slip 0.05 lost up to 0.008); BENCHMARKS.md,
#: "The clone budget from 31 to 100 views, session 14"
BUDGET_FLOOR, ALLOC_EVEN_VIEWS = 10, 31
#: ``alloc="visits"`` from random starts (:meth:`ReplayMerger._starts_spread`) on a world of ALLOC_WAIT_VIEWS to
#: ALLOC_EVEN_VIEWS - 1 views (21-30: the even count 28-20 is below CLONE_CAP, so clones may move): the first sleep
#: of stepwise EM waits, as on many views, until its new episodes hold ALLOC_STEPS x ``H`` steps and shares the
#: clones by the visits of all of them, each seen view's visits counted ALLOC_PRIOR more (pseudo-visits: the shares
#: of a sample of a few visits per view shrink towards the even layout, those of a long one hardly move). The first
#: sleep's ~460 steps (10 episodes) gave the rarely seen views of 16x16 grids with 24-29 colours (about 10 places
#: per view) 8-10 clones of the even 21-25: held-out 0.950-0.972, 0.006-0.025 under EM on 4 of 8 random-start
#: runs; with this rule 0.978-0.982 on those 4 (EM 0.975-0.979), the other 4 within -0.002..+0.008 of before, and
#: the layout of the 25-colour grid s0 even. Without the pseudo-visits that run stayed at 0.971 (EM - 0.003). From
#: a fixed start the sample is local however long: the same rule there cost the 25-colour grid with noise 0.004 on
#: both seeds (an oracle miss on s0), so a fixed start keeps the first sleep's sample as it is (MiniGrid FourRooms
#: 3x3 unchanged). 31-100 views from random starts keep the even layout: shared by visits and pseudo-visits, the
#: 60-colour 24x24 grid lost 0.01-0.035 (BENCHMARKS.md, "Clones from random starts on 25-60 views, session 15")
ALLOC_WAIT_VIEWS, ALLOC_PRIOR = 21, 30.0
#: ``n_iter=None``: iterations per sleep ``clip(ITER_BUDGET // H, 2, 8)`` for ``H`` clones in all, decided once
#: for the life. A model of few views (4 views x 30 clones: 6 iterations) learns slowly by stepwise EM and its
#: passes are cheap; every model of 300 clones or more (10 views x 30, 20 x 30, MiniGrid's 5 per view) keeps 2
ITER_BUDGET = 720
#: the fewest and the most iterations per sleep of ``n_iter=None``
ITER_MIN, ITER_MAX = 2, 8
#: slow sleeps: a model of more than SLOW_SLEEP_CLONES clones in all and at least SLOW_SLEEP_PER_VIEW clones per
#: view on average (few views of many clones: 30x30 grids with 20 colours, 20x20 with 15) sleeps after
#: ``SLOW_SLEEP_FACTOR x min_new`` new episodes and replays ``SLOW_SLEEP_FACTOR x replay`` episodes (the replay
#: ratio kept: the same E-step work per episode, half the passes over its big view-pair blocks -- lumping, the
#: lumped and restricted models, absorb and M-step -- per episode). Models of many views with few clones each
#: (MiniGrid FourRooms: 600 clones, 20 per view with the 3x3 view) keep every sleep: there fewer sleeps cost up
#: to 0.024 accuracy (BENCHMARKS.md, "Fewer sleeps on big models, session 13"); :attr:`ReplayMerger.sleep_factor_`
SLOW_SLEEP_CLONES, SLOW_SLEEP_PER_VIEW, SLOW_SLEEP_FACTOR = 400, 25, 2
#: a slow-sleeping model's noise look-ahead (:meth:`ReplayMerger._views_read_as_noise`) is thinned once NOISE_AFTER
#: updates are made and the kept rate of random views is below NOISE_SKIP_RATE: it runs at every
#: NOISE_SKIP_EVERY-th sleep only (it still updates the rate there, so views turning noisy later are read as
#: noise within NOISE_SKIP_EVERY sleeps); on clean views it hardly swaps any view but costs a forward pass and
#: a look-ahead per sleep
NOISE_SKIP_RATE, NOISE_SKIP_EVERY = 0.005, 4
#: ... and so is the look-ahead of any model of more than NOISE_SKIP_CLONES clones with at least NOISE_SKIP_PER_VIEW
#: clones per view, which keeps every sleep (MiniGrid FourRooms 3x3: 30 views x 20; 16x16-24x24 grids of 25-60
#: colours: 10-24 per view). The look-ahead's cost per step grows with a view's clones times its successors' clones;
#: on FourRooms 3x3 it was 0.4-0.6 s of the 5 s bound. Session 16 (helper sparse16): fit 0.84-0.95 of main's on
#: FourRooms 3x3 side by side (held-out 0.9471 / 0.9405 / 0.9398 -> same / same / 0.9399); the 50 edges runs of
#: those grids: noise and clean identical, slips and random starts moved both ways (mean held-out +0.0001, the
#: same 8 misses). With 4-5 clones per view (MiniGrid's 5x5 and 7x7 views) the look-ahead is cheap and thinning
#: it moved held-out by -0.0003 (MAIN FourRooms 7x7) / -0.0004 (PROBE): they keep it at every sleep
#: (BENCHMARKS.md, "Big-model sleeps, session 16")
NOISE_SKIP_CLONES, NOISE_SKIP_PER_VIEW = 400, 10
#: ``deep=None``: a deep sleep (batch EM over the whole buffer, :meth:`ReplayMerger._deep_sleep`) makes
#: ``DEEP_BUDGET // H`` iterations for ``H`` clones in all (13 with 3 views of 45 clones, 15 with 4 of 30) on
#: models of at most DEEP_MAX_CLONES clones (FEW_VIEWS views of FEW_VIEW_CLONES, or 4 of 30), where stepwise EM
#: is slowest; none on larger ones (with 6-8 views they gained nothing measurable and lost up to 0.007 with
#: slips: BENCHMARKS.md, "Few-colour worlds under slips, session 11")
DEEP_BUDGET, DEEP_MAX_CLONES = 1800, FEW_VIEWS * FEW_VIEW_CLONES
#: a deep sleep's kept counts: this share from the buffer re-counted, the rest the stepwise counts before it
#: (replacing them all overfits the buffer's 200 episodes where slips spread the rows; BENCHMARKS.md,
#: "Few-colour worlds under slips, session 11"; 0.75 since the slip share's floor holds ``e``: session 12)
DEEP_MIX = 0.75
#: deep sleeps of a model of at most FEW_VIEWS views run over its last FEW_VIEW_DEEP_EPISODES episodes (the buffer of
#: ``window`` and the episodes it dropped before, views and actions only), move the kept counts a share
#: FEW_VIEW_DEEP_MIX towards theirs (instead of DEEP_MIX), in ``deep x window // episodes`` iterations (at least
#: FEW_VIEW_DEEP_MIN_ITER, at most ``deep``: at most the passes of a deep sleep over the buffer); the episodes
#: dropped from the buffer keep their views as the last deep sleep read them (no look-ahead over them again).
#: Stepwise EM and deep sleeps over 200 episodes left the 2-colour 10x10 torus's log-likelihood rising to the end
#: of a 1,000-episode life, 0.014-0.033 below batch EM on all 8 hold-out runs; now -0.004 to +0.009 against EM
#: (+0.021 to +0.034), the 3-colour hold-out worlds -0.008 to +0.029, fit CPU within load noise of before. Over
#: the 200 buffered episodes alone such a mix loses (the slips spread the rows, see DEEP_MIX); a mix of 1.0 kept a
#: duplicate clone of a slipping 4-place ring apart (tests/test_replay.py): BENCHMARKS.md, "Deep sleeps over
#: 1,000 episodes on few-view worlds, session 14"
FEW_VIEW_DEEP_EPISODES, FEW_VIEW_DEEP_MIX, FEW_VIEW_DEEP_MIN_ITER = 1000, 0.9, 2
#: ``deep=None`` on a model of more than DEEP_MAX_CLONES and at most LIGHT_DEEP_MAX_CLONES clones in all (6-8 views
#: x 30: no deep sleeps of ``DEEP_BUDGET // H`` iterations): a light deep sleep of LIGHT_DEEP_ITER iterations over
#: the buffer whenever ``window`` episodes were learned since the last one, and the split evidence kept longer
#: (SPLIT_MEMORY_MID instead of SPLIT_MEMORY: about 3x the splits). Neither alone helped; together, on the
#: 6-colour 12x12 torus (180 clones), noise 0.05 0.922/0.913 -> 0.947-0.955/0.938-0.941, slip 0.05 0.927/0.937 ->
#: 0.948/0.952, random starts s1 0.947 -> 0.965, and the 8-colour 15x15 grid from random starts 0.928 -> 0.949;
#: other runs of 136-240 clones -0.006 to +0.003, fit CPU +0.1-0.5 s. The longer memory alone cost the bigger
#: models up to +0.85 s and made a miss on the 135-clone torus, hence the window (BENCHMARKS.md, "Light deep
#: sleeps on mid-size models, session 13"; analysis of helper split13)
LIGHT_DEEP_MAX_CLONES, LIGHT_DEEP_ITER, SPLIT_MEMORY_MID = 240, 2, 0.9
#: random starts on a model of more than LIGHT_DEEP_MAX_CLONES clones (no deep sleeps by size): each place is seen
#: rarely, in episodes far apart, and stepwise EM keeps a place's counts only while replays bring it back (its
#: memory is about ``window`` episodes). There the buffer keeps the last LONG_MEMORY_WINDOW episodes (replays are
#: drawn from all of them) and every ``window // 2`` episodes a deep sleep of LONG_MEMORY_ITER iterations
#: re-counts the whole buffer under the current model, without the noise look-ahead (clean views under a model
#: still learning look like noise; and it would cost more than the EM passes). The signal is the exact phase's
#: end by "start" (episodes that start with different views); worlds of more than ALLOC_MANY_VIEWS views keep
#: the path without it (MiniGrid from random poses: -0.003 to +0.007, fit CPU +0.6-0.8 s). Measured (session 14, helper price14): batch EM
#: over all 1,000 episodes from replay's final clones gains 0.03-0.05 in one pass on grid-30x30-c10 and c20 from
#: random starts; with this rule the 20x20-c15 grid from random starts 0.903 -> 0.956 (BENCHMARKS.md, "Long
#: memory from random starts, session 14")
LONG_MEMORY_WINDOW, LONG_MEMORY_ITER = 1000, 1
#: on a model of long memory's size from random starts (:meth:`ReplayMerger._split_memory`) the split evidence of earlier
#: sleeps is multiplied by LONG_MEMORY_SPLIT_MEMORY at each sleep instead of SPLIT_MEMORY (as SPLIT_MEMORY_MID on light deep sleeps). A sleep
#: of 10 new and 20 replayed episodes (1,500 steps) visits each of 600 clones about 2.5 times: with SPLIT_MEMORY
#: (0.5) a clone's evidence stays near 5 visits, under SPLIT_MIN_VISITS (20), so the split test almost never ran
#: and a clone holding two places stayed merged (the 60-colour 24x24 grid from random starts, 10 clones per view for
#: 9-10 places: 30-32 splits over the life, 75 / 110 clones holding two places or more, held-out 0.9438 / 0.9062
#: against EM's 0.9776 with 1,200 clones; 720 clones reached only 0.9648, so not capacity). With 0.9 (about 25
#: visits): 350-360 splits, 0.9778 / 0.9806, fit CPU 0.86x side by side; 20x20-c40 0.9688 / 0.9696 -> 0.9772 /
#: 0.9794, UNSEEN grid-20x20-c15 0.9462 / 0.9420 -> 0.9658 / 0.9698 (oracle bound met now; fit +4% / +12%),
#: grid-30x30-c20 0.6904 / 0.6714 -> 0.6972 / 0.6918 (fit -2% / +8%), graph-200-a3-c10 +0.004 / +0.007; every
#: other random-start run of > 240 clones -0.004..+0.001 (PROBE grid-30x30-c10 -0.0026 / -0.0038, at EM - 0.0100
#: on s0). BENCHMARKS.md, "Split evidence kept longer from random starts, session 16 (issue 22; helper c60_16)"
LONG_MEMORY_SPLIT_MEMORY = 0.9
#: the long memory's random starts: more than LONG_MEMORY_START_SHARE of the buffered episodes start with another
#: view than the most common first view. The exact phase also ends by "start" when one noisy view begins an episode
#: from the fixed start (q = 0.05: about 5% of first views differ; random starts on 9+ views: 80% or more), and there
#: the long memory cost 0.7-1.3 s per 1,000 episodes for nothing (session 14 lead re-run: paper grid noise 2.6-2.7 ->
#: 3.6-4.0 s, 30x30-c20 noise 4.9 -> 6.1 s, 20x20-c15 noise -0.0026, a new oracle miss)
LONG_MEMORY_START_SHARE = 0.5
#: ``exact=True``: in the first EXACT_WORK_EPISODES episodes the exact phase ends when the fold's work counter
#: (journal rows written and red blocks scanned by its sleeps, :data:`hmmmerge.fold._kernels.WORK`) exceeds
#: ``EXACT_WORK_BASE + EXACT_WORK_PER_STEP x steps`` lived, and at any time when one sleep's work exceeds
#: EXACT_SLEEP_WORK (a sleep stops as soon as it passes its budget). Counts, not times: results stay
#: reproducible. The fold's whole life on the clean large grids of the benchmark sets is 20-30 million, its
#: largest sleep on their clean worlds 17.6 million (a random graph); on MiniGrid FourRooms from the start pose
#: its work grows with level 1 (the 3x3 view: 48 million in the first 100 episodes, 960 million in the next
#: 100), and the phase ends after 80-150 episodes, before the fold has cost a second. A phase ended late costs
#: the accuracy of the learner started late (a 12x12 torus ended after 795 episodes: 0.940 against 0.991), so
#: the budget that grows with the steps holds early only (BENCHMARKS.md, "Clean worlds, session 12: an exact
#: phase")
EXACT_WORK_BASE, EXACT_WORK_PER_STEP, EXACT_WORK_EPISODES, EXACT_SLEEP_WORK = 20_000_000, 1_000, 200, 50_000_000
#: ``exact=True``, after EXACT_WORK_EPISODES: a fold's sleep may spend at most EXACT_LATE_PRICE_PER_STEP x the
#: steps lived since its last sleep (its episodes since then x the mean steps of an episode) of PRICED work, else
#: the phase ends with reason "work": the fold's late cost per step (hence per 100-episode block) stays bounded.
#: Priced work is WORK + PRICE (:data:`hmmmerge.fold._kernels.PRICE`: 2 per pair popped by a fold, 16 per
#: tentative fold), which costs 7-13 ns of CPU per unit on every world measured, where WORK alone cost 10-39
#: (a maze of 3 colours: a third of the red blocks share a blue block's colour, and the tentative folds, their
#: rollbacks and pops that WORK does not count are half its CPU). Replaces session 13's EXACT_LATE_WORK_PER_STEP
#: (20,000 on WORK; renamed, no alias: it bounds another count). Measured (session 13, analysis of helper work13)
#: on every clean run of the three benchmark sets: late sleeps need at most 13,100 per step (torus-12x12-c6 s1;
#: graph-200-a3-c10 s1 12,600), but for one transient of graph-100-a4-c12 s0 (28,700 at episode 236, where the
#: phase ended already); the hold-out 2-colour torus 10x10 clean at most 19,500; a maze of 11x11 with 3
#: colours under slips 0.05 (no contradiction until episode 368) grew from 16,600 per step at episode 216 to
#: 21,500 at 236 (where the phase now ends, was 295 on WORK) and 54,800 at 295 (BENCHMARKS.md, "A late fold's
#: work per step, session 13" and "A priced late fold, session 14")
EXACT_LATE_PRICE_PER_STEP = 20_000
#: in the exact phase the fold sleeps after ``max(min_new, lived // EXACT_SLEEP_SHARE)`` new episodes: each of
#: its sleeps passes over all of level 1 (its link counts and C are counted afresh), so sleeps that grow rarer
#: with the life keep the cost of a 100-episode block from growing with it (every 10 episodes until 200
#: episodes, every 50 at 1,000; BENCHMARKS.md, "Clean worlds, session 12: an exact phase")
EXACT_SLEEP_SHARE = 20
#: why the exact phase ended (``exact_end_reason_``), in the order of their codes in the checkpoint
EXACT_REASONS = ("contradiction", "start", "work")
#: the scale of the kept counts below which it is folded into them (``S`` stays far from the float range)
SCALE_FLOOR = 1e-100
#: a clone's row of a batch's counts is dropped when every count in it would add less than this share of
#: the pseudocount at the M-step (``window * add * count``): clones the batch hardly passed through only decay
COUNT_FLOOR = 1e-3
#: a pair of views is dropped at a sleep when all its kept counts add at most this share of the pseudocount
#: at the M-step (``window * count``; see ReplayMerger._drop_faded_pairs)
PAIR_FLOOR = COUNT_FLOOR
#: on a model of more than ONLINE_BELIEF_CUT_CLONES clones in all (SLOW_SLEEP_CLONES), the agent's online level-2
#: beliefs (its ``l2`` and ``l2_filter`` predictions, :mod:`hmmmerge._agent_kernels`) drop, after each view, the
#: clusters holding less than ONLINE_BELIEF_CUT of the belief. Replay's emissions give every view the noise floor
#: ``q / K`` (:meth:`ReplayMerger.emission`), so without a cut no cluster a belief reached ever leaves it, and on
#: big models both beliefs spread over most clusters: ``agent_steps`` cost 1.4-2.0 s of a run at load 5 (grid-16x16
#: with 25 colours and noise, 20x20 with 40 and 30x30 with 20 from random starts), 0.3-0.5 s with the cut. Level 2's
#: model and the held-out score do not read these beliefs (:meth:`ReplayMerger.place` connects level-1 states to
#: replay's own filtered clone): held-out is bit-identical on every run measured; the online predictions move
#: (last 50 episodes 0 to -0.03, all episodes 0 to -0.004, from random starts; 0 under noise), smaller models keep
#: theirs; BENCHMARKS.md "Cheaper big-model sleeps, session 15". From random starts a cluster cut early could
#: never come back when the views proved it right (the noise floor kept it alive in the uncut belief): online
#: last 50 episodes -0.030 (e-grid-20x20-c40 s0), so the lead kept those runs uncut (session 15). Now the cut
#: mass is kept as the belief's ``lost`` share, read as spread evenly over the clusters and conditioned at each
#: view with them: the clusters of a view the support does not explain come back once their share of it reaches
#: the cut (:func:`hmmmerge._agent_kernels._condition`), so the cut holds from random starts too: online last 50
#: +0.0024 on e-grid-20x20-c40 s0 and grid-20x20-c15 s0 (all episodes +0.0003..+0.0005), fit 0.76-0.82 of the
#: uncut path side by side, held-out identical; BENCHMARKS.md "A belief cut that recovers, session 15" (reloc15)
ONLINE_BELIEF_CUT, ONLINE_BELIEF_CUT_CLONES = 1e-6, SLOW_SLEEP_CLONES
#: the online belief cut also holds on a model of at most ONLINE_BELIEF_CUT_VIEWS views (45 clones per view with at
#: most FEW_VIEWS, else 30: 90-150 clones in all): there too the noise floor keeps every cluster a belief reached in
#: it, and ``agent_steps`` was 4-22% of such a run's fit. Side by side against main, alternated, load 3-4, held-out
#: identical on every run: 8 hold-out runs of 2-3 colours, ``agent_steps`` 0.30-0.70 -> 0.16-0.40 s (the 2-colour
#: torus with noise 0.52 -> 0.55: its floor q / 2 keeps the clusters above the cut; slip 0.10 0.67 -> 0.58), fit
#: -0.3 s median (-0.7..+0.8, load noise); 5 runs of 4-5 colours (PROBE grid-10x10-c4, edges 14x14 with 4 and 5)
#: 0.50-0.71 -> 0.30-0.36 s, fit -0.26..+0.03 s. Held-out identical on 26 hold-out runs of 2-3 colours and on the
#: MAIN aliased-loop (3 views) and cscg-room (4) and PROBE torus-9x9-c3 (3) and grid-10x10-c4 (4) runs (54); online
#: last 50 identical but from random starts, where it rose (+0.001 to +0.063: maze-11x11-c3 0.855 -> 0.902,
#: torus-9x9-c3 s1 0.847 -> 0.910), and edges 14x14-c5 slip 0.05 s0 -0.0004; BENCHMARKS.md, "Few-view worlds: a
#: local optimum, restarts, annealing, session 16"
ONLINE_BELIEF_CUT_VIEWS = 5
#: the largest per-clone table of true labels kept for purity (entries; beyond it the agent counts purity
#: from level 1 at every sleep)
CLONE_LABEL_TABLE_MAX = 4_000_000
_NO_LABELS = (np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64))


def slip_share_floor(off, tot, n_actions: int) -> float:
    """The slip share the recorded moves show: the moves'-weighted median over rows ``(a, i)`` of the share
    of a row's moves that leave for another view than its most common one, times ``A / (A - 1)`` (in a
    deterministic world a slip leaves the intended view with probability at most ``(A - 1) / A``).  The
    median, not the mean: a clone that stands for two places spreads its row too, but such rows are a
    minority once the clones are learned (the mean, capped at ``slip``, left ``e`` at 0.006-0.016 on clean
    worlds; the median falls to about 0 there); slips spread every row.  ``off``, ``tot``: per row, the
    moves to another view and all moves.

    >>> round(slip_share_floor(np.array([1.0, 0.0, 2.0]), np.array([10.0, 5.0, 10.0]), 4), 4)   # median share 0.1
    0.1333
    """
    off, tot = np.ravel(off), np.ravel(tot)
    keep = tot > 0.0
    if not keep.any() or n_actions < 2:   # one action: nothing to slip to
        return 0.0
    r, w = off[keep] / tot[keep], tot[keep]
    o = np.argsort(r, kind="stable")
    c = np.cumsum(w[o])
    return float(r[o][np.searchsorted(c, 0.5 * c[-1])]) * n_actions / (n_actions - 1.0)


def allocate_clones(visits, total: int, floor: int, cap: int) -> np.ndarray:
    """Clones per view: every view ``floor``, then one clone at a time, ``total`` in all, to the seen view
    (``visits > 0``) below ``cap`` with the largest ``visits / (its clones + 1)`` (the lowest view first on
    a tie): clones in proportion to visits, within the floor and the cap (the highest-averages rule).
    Fewer than ``total`` when every seen view reaches the cap; ``total`` below ``floor`` per view is an error.

    >>> allocate_clones([100, 10, 0, 1], total=12, floor=1, cap=8).tolist()
    [8, 2, 1, 1]
    >>> allocate_clones([5, 5, 5], total=90, floor=1, cap=30).tolist()   # even views: all at the cap
    [30, 30, 30]
    """
    visits = np.asarray(visits)
    if visits.ndim != 1 or not len(visits) or (visits < 0).any() or not np.isfinite(visits).all():
        raise ValueError("visits must be a non-empty 1-d array of finite counts >= 0")
    if not 1 <= floor <= cap:
        raise ValueError(f"need 1 <= floor <= cap, got floor={floor}, cap={cap}")
    K = len(visits)
    if total < floor * K:
        raise ValueError(f"total={total} clones cannot give {K} views {floor} each")
    # the quotients visits / k of a view's clones k = floor+1..cap, taken largest first: the greedy order
    k = np.arange(floor + 1, cap + 1, dtype=np.float64)
    view = np.repeat(np.arange(K), len(k))
    q = (visits.astype(np.float64)[:, None] / k[None, :]).ravel()
    seen = q > 0
    order = np.lexsort((view[seen], -q[seen]))[:total - floor * K]
    return floor + np.bincount(view[seen][order], minlength=K).astype(np.int64)


class ReplayMerger(Estimator):
    """Level 2 as a clone HMM learned by stepwise EM over replayed episodes at sleeps (module docstring).

    Parameters
    ----------
    n_clones : clones (level-2 capacity) per observation; None: 30, or fewer when that makes more than
        :data:`CLONE_BUDGET` clones in all (many views: a sleep's work grows with pairs of views x clones^2),
        but at least :data:`BUDGET_FLOOR` (10; 5 with more than 100 observations, as the benchmark's EM); :data:`FEW_VIEW_CLONES`
        (45) with at most :data:`FEW_VIEWS` (3) observations. With 4 observations (30 each) from random starts, a
        view whose splits find no spare grows up to :data:`GROW_VIEW_CAP` (40) clones (:meth:`_grow`).
    replay : episodes replayed per sleep besides the new ones.
    window : replayed episodes are drawn from the last ``window`` episodes (the buffer).
    n_iter : EM iterations per sleep; None: ``clip(ITER_BUDGET // H, 2, 8)`` for ``H`` clones in all
        (:data:`ITER_BUDGET` = 720: 5 with 3 views of 45 clones, 6 with 4 of 30, 4 with 6, 3 with 8, 2 from
        10 views on), decided when the merger first sees data (:attr:`n_iter_`).
    step_exponent : ``eta = (u + 2) ** -step_exponent`` (0.5 < exponent <= 1: the stepwise-EM conditions).
    pseudocount : added to every expected count of ``window * S`` at the M-step.
    prune : transitions below it are dropped from the agent's online level 2.
    risk : the Hoeffding test's risk when clones are lumped into clusters (ALERGIA's alpha); the Bayes-factor
        test tells two clones apart when the log factor exceeds ``log(1 / risk)``.
    tolerance : next-cluster frequencies closer than it always pass the Hoeffding test (EM's own imprecision).
    dirichlet : the least Dirichlet concentration per next cluster of the Bayes-factor test (it takes the
        estimated noise rate + slip share when larger: :meth:`_lump`); 0 turns that test off (Hoeffding alone).
    min_new : a sleep with fewer new episodes than this is postponed to the next one (long episodes:
        fewer, larger sleeps); the first sleep is postponed only to share the clones of 21-30 views from random
        starts or of more than 100 views by visits (:data:`ALLOC_STEPS`). Models of more than :data:`SLOW_SLEEP_CLONES`
        clones with at least :data:`SLOW_SLEEP_PER_VIEW` per view take :attr:`sleep_factor_` times ``min_new``
        and ``replay`` (and thin their noise look-ahead, :data:`NOISE_SKIP_RATE`).
    slip : the initial estimate of the share of moves made by a uniformly random action instead of the
        recorded one (``T_a = (1 - e) Q_a + e mean_b Q_b``, ``e`` then estimated by EM); 0 turns it off.
    split : a clone whose visits came in two ways followed by different views is split in two at a sleep
        when the likelihood-ratio statistic of the two groups exceeds this (:meth:`_split`); 0 turns it off.
    deep : iterations of a deep sleep, made whenever ``window // 2`` episodes were learned since the last
        one: batch EM over every buffered episode from the current model, the kept counts moved a share
        :data:`DEEP_MIX` towards the buffer's (:meth:`_deep_sleep`); None: ``DEEP_BUDGET // H`` for ``H``
        clones in all up to :data:`DEEP_MAX_CLONES` (135: 3 views of 45 clones, 4 of 30), else 0 (:attr:`n_deep_`),
        and up to :data:`LIGHT_DEEP_MAX_CLONES` light deep sleeps every ``window`` episodes; larger models from
        random starts keep a longer buffer re-counted every ``window // 2`` episodes (:data:`LONG_MEMORY_WINDOW`);
        0 turns them all off. With at most :data:`FEW_VIEWS` views a deep sleep runs over the last
        :data:`FEW_VIEW_DEEP_EPISODES` episodes (older ones with their views as read while buffered), the kept
        counts moved a share :data:`FEW_VIEW_DEEP_MIX` towards theirs, in at most as many passes as over the buffer.
    alloc : ``"visits"``: with ``n_clones=None``, at the first sleep the views seen so far share their
        clones of the even layout by how often each was seen (:func:`allocate_clones`, at least
        :data:`CLONE_FLOOR` and at most :data:`CLONE_CAP` each, or the even count when larger: 45 with
        :data:`FEW_VIEWS` views or fewer) when the most seen view's share asks for more than that cap; a
        view not seen yet keeps the even count, the total is the even layout's. A world of at most 20 views keeps 30 per view, as with ``"even"`` (BENCHMARKS.md,
        "Clones by visits"), and so does one of :data:`ALLOC_EVEN_VIEWS` (31) to :data:`ALLOC_MANY_VIEWS` views. With
        :data:`ALLOC_WAIT_VIEWS` (21) to 30 views from random starts the first sleep waits for :data:`ALLOC_STEPS` x
        ``H`` steps and each seen view's visits count :data:`ALLOC_PRIOR` more. With more than :data:`ALLOC_MANY_VIEWS` views the first sleep waits for
        :data:`ALLOC_STEPS` x ``H`` steps and the seen views share :data:`ALLOC_MEAN` clones each on average.
        ``"even"``: every view the same number (``n_clones`` or its default).
    priority : draw the replayed episodes in proportion to the rarity of the places they pass through
        (:meth:`_replay_priority`; the start distribution is then learned from the new episodes alone);
        False: uniformly, every episode's start counted (the learner of session 10; BENCHMARKS.md,
        "Clean large grids, session 11").
    slip_floor : the slip share ``e`` is at least the share of slips the recorded moves show
        (:func:`slip_share_floor`), at most ``slip``: stepwise EM alone lets the free rows of ``Q`` absorb
        the slips and ``e`` falls to 0 (BENCHMARKS.md, "The slip share's floor, session 12": it gains on slips;
        the few clean runs it cost their 0.99 are learned by the exact phase since, so it is on by default).
    exact : the exact phase (module docstring): level 2 is the exact fold's while the data are consistent with
        a deterministic world from one start and the fold's work stays within its budget; False: stepwise EM
        from the first sleep (the learner of session 11).

    Attributes
    ----------
    exact_phase_ : whether level 2 is still the exact fold's.
    exact_ended_ : the episodes lived when the exact phase ended (None while it lasts; 0 with ``exact=False``).
    exact_end_reason_ : ``"contradiction"`` (two episodes with the same actions from the start saw different
        views), ``"start"`` (an episode started with another view), ``"work"`` (the fold's work budget), or None.
    sleep_factor_ : :data:`SLOW_SLEEP_FACTOR` on a model of few views with many clones each (slow sleeps),
        else 1: its sleeps wait for ``sleep_factor_ x min_new`` new episodes and replay ``sleep_factor_ x replay``.

    >>> ReplayMerger(n_clones=5).n_clones
    5
    >>> from hmmmerge import gridworld, random_walk
    >>> from hmmmerge.agent import TwoLevelMemory
    >>> clean = TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld(), 30, seed=0))
    >>> clean.merger_.exact_phase_, clean.merger_.exact_ended_
    (True, None)
    >>> slips = TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld().with_noise(slip=0.2), 30, seed=0))
    >>> slips.merger_.exact_phase_, slips.merger_.exact_end_reason_
    (False, 'contradiction')
    """

    _fold = None            # the exact phase's fold (see _init)
    _exact_end = None

    _parameter_constraints = {
        "n_clones": Int(1, 4096, none=True), "replay": Int(0, 10**6), "window": Int(1, 10**6), "n_iter": Int(1, 1000, none=True),
        "step_exponent": Float(0.5, 1.0, low_open=True), "pseudocount": Float(0.0, 1e6, low_open=True),
        "prune": Float(0.0, 1.0), "risk": Float(0.0, 1.0, low_open=True),
        "tolerance": Float(0.0, 1.0), "slip": Float(0.0, 0.99), "min_new": Int(1, 10**6),
        "split": Float(0.0, 1e9), "dirichlet": Float(0.0, 1.0), "alloc": Options("visits", "even"),
        "priority": Bool(), "deep": Int(0, 1000, none=True), "slip_floor": Bool(), "exact": Bool(),
    }

    def __init__(self, n_clones: int | None = None, replay: int = 20, window: int = 200, n_iter: int | None = None,
                 step_exponent: float = 0.51, pseudocount: float = 1e-3, prune: float = 1e-3, risk: float = 0.05,
                 tolerance: float = 0.2, slip: float = 0.05, min_new: int = 10, split: float = 25.0,
                 dirichlet: float = 0.01, alloc: str = "visits", priority: bool = True, deep: int | None = None,
                 slip_floor: bool = True, exact: bool = True):
        self.n_clones = n_clones
        self.replay = replay
        self.window = window
        self.n_iter = n_iter
        self.step_exponent = step_exponent
        self.pseudocount = pseudocount
        self.prune = prune
        self.risk = risk
        self.tolerance = tolerance
        self.slip = slip
        self.min_new = min_new
        self.split = split
        self.dirichlet = dirichlet
        self.alloc = alloc
        self.priority = priority
        self.deep = deep
        self.slip_floor = slip_floor
        self.exact = exact
        self._A = None

    # ------------------------------------------------------------ set-up
    def _init(self, n_obs: int, n_actions: int) -> None:
        self._validate_params()
        self._K, self._A = int(n_obs), int(n_actions)
        self._layout(np.full(self._K, self._clones_per_observation(self._K), dtype=np.int64))
        self._T = None          # (A, H, H) transitions, None before the first sleep
        self._B = None
        self._S = None          # kept expected counts per episode (stepwise EM), as ``g * S`` (see _g)
        self._g = 1.0           # the scale of S: the decay of an update multiplies it, not every entry of S
        self._Z = None          # (A, H) row sums of S (unscaled, kept as S changes)
        self._Sb = None
        self._Q = None          # (A, H, H) transitions of the executed action (T mixes them with the slip)
        self._slip = float(self.slip)   # estimated share of moves made by a random action
        self._Sslip = 0.0       # kept expected slipped moves per episode
        self._Soff = None       # (A, H) kept recorded moves per episode to another view than the row's most
        self._Stot = None       # common one, and all recorded moves per row (slip_floor=True: slip_share_floor)
        # observation pairs (o, o') seen in sequence: T, Q, S are zero outside their clone blocks, and every
        # pass over them reads those blocks only (a sleep's work grows with the pairs, not with clones^2)
        self._pairs = np.zeros((0, 2), dtype=np.int64)
        self._has_pair = np.zeros((self._K, self._K), dtype=bool)
        self._succ = None        # CSR of the pairs by first observation (cached)
        self._pred = None        # CSR of the pairs by second observation (cached)
        self._C = None           # the E-step's count buffer, zero outside a pass
        self._updates = 0
        self._wanting = None     # per view: clones that passed the split test and found no spare (_split, _grow)
        self._evidence = None    # (codes, counts): the split evidence, (clone, way in, what followed) triples
        self._noise = 0.0        # estimated share of views replaced by a random one (emissions of level 2)
        self._noise_idle = 0     # sleeps since the noise look-ahead last ran (thinned: NOISE_SKIP_EVERY)
        self._var = 0.0          # variance factor of the kept statistics: 1 / (effective number of episodes)
        self._episodes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (obs, acts, states), last `window`
        self._old: list[tuple[np.ndarray, np.ndarray]] = []   # (views as read, acts) dropped from it, for long deep
        self._read: list[np.ndarray | None] = []   # per buffered episode: its views as the last deep sleep read them
        self._n_new = 0         # episodes at the end of the buffer not learned from yet
        self._since_deep = 0    # episodes learned from since the last deep sleep
        self._cur = ([], [], [])  # the episode being lived: obs, actions, level-1 states
        self._last = -1          # the last level-1 state placed
        self._n_seen = 0         # level-1 states that existed at the last chunk
        self._clone_state = np.full(0, -1, dtype=np.int64)   # most probable clone of each level-1 state
        # per clone: level-1 states, and states per true label (label -1 apart), kept as states take clones
        # (sleeps then read clones, not level 1: see _held_blocks, purity); None: to count from _clone_state
        self._clone_n = None
        self._clone_lab = self._clone_unlab = None
        self._label_width = 0    # labels seen: below it
        self._block_of = np.zeros(0, dtype=np.int64)         # block of each cluster
        self._lumped = None      # (T, B) of the blocks (cached)
        self._t2 = None          # the agent's level-2 CSR (cached)
        # the exact phase: the fold that is level 2 meanwhile (None once it ended), the (action, state) pairs
        # of level 1 under which a state was created (a second one proves the world is not deterministic),
        # the first episode's start state, steps and episodes lived, the fold's work so far
        self._fold = None
        if self.exact:
            from .fold import FoldMerger

            self._fold = FoldMerger()
        self._used = np.zeros((self._A, 0), dtype=bool)
        self._start0 = -1
        self._steps = self._lived = self._work = 0
        self._since_fold = 0     # episodes ended since the fold's last sleep
        self._exact_end = None if self.exact else (0, -1)   # (episodes lived, reason code) when it ended

    def _layout(self, sizes) -> None:
        """Clones per view ``sizes``: the clone ranges, the capacity and what is sized by it (before any model)."""
        from ._limits import check_memory

        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self._H = int(self._sizes.sum())
        # the size gates read the even layout's clones when the views grew past it (see GROW_VIEW_CAP)
        gate = min(self._H, self._K * self._clones_per_observation(self._K))
        self._n_iter = self._iterations(self._H)
        self._n_deep = self._deep_iterations(self._H, gate)
        # light deep sleeps and the longer split memory (see LIGHT_DEEP_MAX_CLONES)
        self._mid = self.deep is None and DEEP_MAX_CLONES < gate <= LIGHT_DEEP_MAX_CLONES
        # deep sleeps over the last FEW_VIEW_DEEP_EPISODES episodes (see FEW_VIEW_DEEP_EPISODES)
        self._long_deep = self._n_deep > 0 and self._K <= FEW_VIEWS
        check_memory(f"replay merger: {self._H} clones x {self._A} actions", 3 * 8 * self._A * self._H ** 2)
        self._colour = np.repeat(np.arange(self._K), self._sizes)
        self._block = np.arange(self._H, dtype=np.int64)     # block (lumped clones) of each clone
        self._cluster_of = np.full(self._H, -1, dtype=np.int64)   # cluster of each block (-1: none)

    def _allocate(self, obs, memory, sample: bool = False) -> None:
        """``alloc="visits"``: before the model is drawn, the views of ``obs`` (the first sleep's episodes)
        share their clones of the even layout by their visits (:func:`allocate_clones`); the others keep
        theirs. Only when the most seen view's share of the visits asks for more than :data:`CLONE_CAP`
        of those clones: the even layout then starves it (MiniGrid's 5x5 view: one view seen from 145
        poses, 134 from 5 or fewer, 5 clones each). Where no view asks for that much (MiniGrid's 7x7 view
        from the start pose), the first sleep's few episodes are too thin a sample to take clones from
        rarely seen views: measured, it lost 0.025 on one run (BENCHMARKS.md, "Clones by visits").
        With :data:`ALLOC_WAIT_VIEWS` to 30 views from random starts or more than :data:`ALLOC_MANY_VIEWS`
        (:meth:`_waits_for_sample`), ``obs`` are all the first sleep's new episodes (at least :data:`ALLOC_STEPS` x
        ``H`` steps, ``sample=True``); with 21-30 views each seen view's visits then count :data:`ALLOC_PRIOR` more
        (pseudo-visits), with more than :data:`ALLOC_MANY_VIEWS` the seen views share :data:`ALLOC_MEAN` clones each
        on average."""
        if self.alloc != "visits" or self.n_clones is not None or ALLOC_EVEN_VIEWS <= self._K <= ALLOC_MANY_VIEWS:
            return
        if (self._clone_state[:self._n_seen] >= 0).any():
            raise ValueError("the clone layout can only change before level-1 states take clones")
        visits = np.bincount(np.asarray(obs, dtype=np.int64), minlength=self._K)
        seen = visits > 0
        if sample and not self._many_views():   # pseudo-visits: a sample of few visits per view moves few clones
            visits = np.where(seen, visits + float(ALLOC_PRIOR), 0.0)
        sizes = self._sizes.copy()
        share = int(sizes[seen].sum())
        if self._many_views():
            share = min(share, ALLOC_MEAN * int(seen.sum()))
        cap = self._clone_cap()
        if visits.max() * share <= cap * visits.sum():
            return   # no view's share of the visits asks for more than the cap: the even layout holds them
        sizes[seen] = allocate_clones(visits[seen], share, CLONE_FLOOR, cap)
        if np.array_equal(sizes, self._sizes):
            return
        self._layout(sizes)
        self._clone_n = None
        self._count_clones(memory)

    def _many_views(self) -> bool:
        """Whether the layout is shared by visits under the rules of many views (:data:`ALLOC_MANY_VIEWS`).

        >>> m = ReplayMerger(); m._init(101, 3); m._many_views(), ReplayMerger(alloc="even")._many_views()
        (True, False)
        """
        return self.alloc == "visits" and self.n_clones is None and self._A is not None and \
            self._K > ALLOC_MANY_VIEWS

    def _waits_for_sample(self) -> bool:
        """Whether the first sleep of stepwise EM waits for :data:`ALLOC_STEPS` x ``H`` new steps and shares the
        clones by their visits: many views (:meth:`_many_views`), or :data:`ALLOC_WAIT_VIEWS` to
        :data:`ALLOC_EVEN_VIEWS` - 1 views (21-30) from random starts (:meth:`_starts_spread`).

        >>> def waits(k, spread=True, **kw):
        ...     m = ReplayMerger(**kw); m._init(k, 4); m._starts_spread = lambda: spread; return m._waits_for_sample()
        >>> [waits(k) for k in (20, 21, 30, 31, 100, 101)], waits(25, alloc="even"), waits(25, n_clones=24)
        ([False, True, True, False, False, True], False, False)
        >>> waits(25, spread=False), waits(101, spread=False)
        (False, True)
        """
        if self._many_views():
            return True
        return self.alloc == "visits" and self.n_clones is None and self._A is not None and \
            ALLOC_WAIT_VIEWS <= self._K < ALLOC_EVEN_VIEWS and self._starts_spread()

    def _starts_spread(self) -> bool:
        """Random starts seen: the exact phase ended by "start" and more than :data:`LONG_MEMORY_START_SHARE` of the
        buffered episodes start with another view than the most common first view (a noisy first view from a
        fixed start ends the phase by "start" too, but leaves most episodes starting alike)."""
        return self.exact_end_reason_ == "start" and self._random_starts()

    def _check(self, memory) -> None:
        if self._A is None:
            self._init(memory.n_obs, memory.n_actions)
        elif (memory.n_obs, memory.n_actions) != (self._K, self._A):
            raise ValueError(f"the merger was built for {self._K} observations / {self._A} actions, "
                             f"level 1 has {memory.n_obs} / {memory.n_actions}")
        if self._clone_n is None:
            self._count_clones(memory)

    def _clones_per_observation(self, n_obs: int) -> int:
        """``n_clones``, or its default for ``n_obs`` observations (see the class docstring).

        >>> [ReplayMerger()._clones_per_observation(k) for k in (1, 3, 4, 10, 20, 30)]
        [45, 45, 30, 30, 30, 20]
        """
        if self.n_clones is not None:
            return int(self.n_clones)
        if n_obs <= FEW_VIEWS:
            return FEW_VIEW_CLONES
        if 30 * n_obs <= CLONE_BUDGET:
            return 30
        return max(BUDGET_FLOOR if n_obs <= ALLOC_MANY_VIEWS else 5, CLONE_BUDGET // n_obs)

    def _clone_cap(self) -> int:
        """The most clones a view gets from ``alloc="visits"``: :data:`CLONE_CAP`, or the even layout's count
        when larger (:data:`FEW_VIEW_CLONES` with at most :data:`FEW_VIEWS` views), so that the even layout
        is never cut by the cap."""
        return max(CLONE_CAP, self._clones_per_observation(self._K))

    def _iterations(self, n_clones_total: int) -> int:
        """``n_iter``, or its default for ``n_clones_total`` clones in all (see :data:`ITER_BUDGET`).

        >>> [ReplayMerger()._iterations(30 * k) for k in (3, 4, 6, 8, 10, 20)]
        [8, 6, 4, 3, 2, 2]
        """
        if self.n_iter is not None:
            return int(self.n_iter)
        return int(min(ITER_MAX, max(ITER_MIN, ITER_BUDGET // int(n_clones_total))))

    def _deep_iterations(self, n_clones_total: int, gate: int | None = None) -> int:
        """``deep``, or its default for ``n_clones_total`` clones in all (see :data:`DEEP_BUDGET`).

        >>> [ReplayMerger()._deep_iterations(h) for h in (45 * 3, 30 * 4, 30 * 5, 30 * 6, 30 * 10)]
        [13, 15, 0, 0, 0]
        """
        if self.deep is not None:
            return int(self.deep)
        if int(n_clones_total if gate is None else gate) > DEEP_MAX_CLONES:
            return 0
        return int(DEEP_BUDGET // int(n_clones_total))

    def _sleep_factor(self) -> int:
        """The factor of ``min_new`` and ``replay`` for this model's capacity (:data:`SLOW_SLEEP_FACTOR` or 1).

        >>> m = ReplayMerger(); m._sizes = np.full(20, 30); m._K = 20; m._sleep_factor()
        2
        >>> m._sizes = np.full(30, 20); m._K = 30; m._sleep_factor()   # 600 clones, 20 per view
        1
        """
        H = int(self._sizes.sum())
        return SLOW_SLEEP_FACTOR if H > SLOW_SLEEP_CLONES and H >= SLOW_SLEEP_PER_VIEW * self._K else 1

    @property
    def sleep_factor_(self) -> int:
        """Slow sleeps (:data:`SLOW_SLEEP_CLONES`): this life sleeps after ``sleep_factor_ x min_new`` new
        episodes, replays ``sleep_factor_ x replay`` and thins its noise look-ahead when it is 2; 0 before any data.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld(), 5, seed=0)).merger_.sleep_factor_
        1
        """
        return 0 if self._A is None else self._sleep_factor()

    @property
    def n_deep_(self) -> int:
        """Iterations of a deep sleep in this life (``deep``, or its default for the capacity); 0 before any data.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(n_colours=3), 5, seed=0)).merger_.n_deep_
        13
        """
        return 0 if self._A is None else self._n_deep

    @property
    def n_iter_(self) -> int:
        """EM iterations per sleep of this life (``n_iter``, or its default for the capacity); 0 before any data.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 5, seed=0)).merger_.n_iter_
        2
        """
        return 0 if self._A is None else self._n_iter

    @property
    def exact_phase_(self) -> bool:
        """Whether level 2 is still the exact fold's (see the class docstring); False before any data."""
        return self._A is not None and self._fold is not None

    @property
    def exact_ended_(self) -> int | None:
        """The episodes lived when the exact phase ended; None while it lasts (or before any data)."""
        return None if self._A is None or self._exact_end is None else int(self._exact_end[0])

    @property
    def exact_end_reason_(self) -> str | None:
        """Why the exact phase ended (:data:`EXACT_REASONS`); None while it lasts or with ``exact=False``."""
        if self._A is None or self._exact_end is None or self._exact_end[1] < 0:
            return None
        return EXACT_REASONS[self._exact_end[1]]

    @property
    def n_clones_total(self) -> int:
        """All clones (the capacity of level 2); 0 before any data."""
        return 0 if self._A is None else self._H

    # ------------------------------------------------------------ online
    def place(self, memory, clusters, states, rng=None) -> bool:
        """Record one chunk of steps and connect its level-1 states to their filtered clone.

        ``states``: the level-1 states after consecutive steps of one episode
        (a chunk starting at ``memory.start_state`` starts an episode).
        Returns True when anything was recorded (the agent then refreshes level 2).

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1); m = ReplayMerger(n_clones=2); cl = Clusters(n_states=0)
        >>> m.place(mem, cl, [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 0])])
        True
        >>> m._cur[1]   # actions of the episode so far (-1: its start)
        [-1, 0, 0]
        """
        self._check(memory)
        states = np.asarray(states, dtype=np.int64)
        if not len(states):
            return False
        starts_episode = int(states[0]) == memory.start_state
        if starts_episode and self._cur[0]:
            self._end_episode()
        if starts_episode:
            self._lived += 1
        if not starts_episode and not self._cur[0]:
            raise ValueError("a chunk continues an episode that was not placed: feed the steps in order")
        nxt = memory.next_state
        prev = np.concatenate([[self._last], states[:-1]])
        acts = np.full(len(states), -1, dtype=np.int64)
        rows = slice(1, None) if starts_episode else slice(None)
        hit = nxt[:, prev[rows]] == states[rows][None, :]
        if not hit.any(axis=0).all():
            raise ValueError("a level-1 state of the chunk has no link from the one before it: "
                             "feed the steps in order")
        acts[rows] = hit.argmax(axis=0)
        obs = memory.emission[states]
        self._cur[0].extend(obs.tolist())
        self._cur[1].extend(acts.tolist())
        self._cur[2].extend(states.tolist())
        self._last = int(states[-1])
        clusters.grow(memory.n_states)
        fresh = states >= self._n_seen   # created since the last chunk: connect them now (the others at sleeps)
        self._n_seen = memory.n_states
        if self._fold is not None:
            reason = self._contradiction(states, prev, acts, fresh, starts_episode, memory.n_states)
            if reason is None:
                self._steps += len(states)
                return self._fold.place(memory, clusters, states, rng)
            self._end_exact(clusters, reason, memory.n_states)
            return True
        if self._T is not None and fresh.any():
            n = len(self._cur[0])
            cur_obs, cur_acts = np.array(self._cur[0]), np.array(self._cur[1])
            clones = self._filtered_clones(cur_obs, cur_acts)[n - len(states):]
            self._connect(clusters, states[fresh], clones[fresh], memory.labels[states[fresh]])
        return True

    def _end_episode(self) -> None:
        obs, acts, sts = (np.asarray(x, dtype=np.int64) for x in self._cur)
        self._episodes.append((obs, acts, sts))
        self._read.append(None)
        self._n_new += 1
        if self._fold is not None:   # the exact phase learned them: the buffer keeps the last window only
            self._n_new = min(self._n_new, int(self.window))
            self._since_fold += 1
        drop = len(self._episodes) - max(LONG_MEMORY_WINDOW if self._long_memory() else int(self.window), self._n_new)
        if drop > 0:
            if self._long_deep:   # kept with their views as read (see _deep_sleep)
                self._old.extend((e[0] if r is None else r, e[1]) for e, r in zip(self._episodes[:drop], self._read))
                del self._old[:max(len(self._old) - max(FEW_VIEW_DEEP_EPISODES - int(self.window), 0), 0)]
            del self._episodes[:drop]
            del self._read[:drop]
        self._cur = ([], [], [])

    # ------------------------------------------------------------ the exact phase
    def _contradiction(self, states, prev, acts, fresh, starts_episode, n_states):
        """Record the level-1 states of a chunk in the trie of the exact phase; the reason code (index of
        :data:`EXACT_REASONS`) when the chunk proves that the episodes do not come from a deterministic world
        seen from one start, else None.

        Level 1 (Algorithm 1) is a trie over the actions from the start: a step follows the link of its
        action when the state there shows the view seen, else a new state replaces the link. So a state is
        created under an (action, state) pair that already had one exactly when two episodes took the same
        actions from the start and then saw different views; an episode's first state created anew while a
        start state exists is a different first view. ``fresh``: the states created since the last chunk.

        >>> m = ReplayMerger(); m._init(2, 1)
        >>> prev = np.array([-1, 0, 1]); acts = np.array([-1, 0, 0])
        >>> m._contradiction(np.array([0, 1, 2]), prev, acts, np.ones(3, bool), True, 3) is None
        True
        >>> m._contradiction(np.array([0, 1, 3]), prev, acts, np.array([False, False, True]), True, 4)   # 1 -0-> 3 and 1 -0-> 2
        0
        """
        if self._used.shape[1] < n_states:
            grown = np.zeros((self._A, max(n_states, 2 * self._used.shape[1], 1024)), dtype=bool)
            grown[:, :self._used.shape[1]] = self._used
            self._used = grown
        if starts_episode:
            if self._start0 < 0:
                self._start0 = int(states[0])
            elif int(states[0]) != self._start0:
                return EXACT_REASONS.index("start")
        made = fresh & (acts >= 0)
        a, p = acts[made], prev[made]
        if self._used[a, p].any():
            return EXACT_REASONS.index("contradiction")
        self._used[a, p] = True
        return None

    def _end_exact(self, clusters, reason: int, n_states: int) -> None:
        """End the exact phase for good: the fold is dropped, C emptied (level 2 is replay's from its next
        sleep, which learns from the buffered episodes: :meth:`sleep`)."""
        self._fold = None
        self._used = np.zeros((self._A, 0), dtype=bool)
        self._exact_end = (self._lived, int(reason))
        clusters.grow(n_states)
        clusters.assignment[:] = -1
        clusters.rewritten(0, np.zeros(0, dtype=np.int64))
        self._block_of = np.zeros(0, dtype=np.int64)
        self._t2 = None

    # ------------------------------------------------------------ model
    def _data(self, obs, acts):
        from .baselines import _em_kernels as K
        from .baselines.em import _Data

        return _Data(K, obs, acts, self._sizes)

    def _filtered_clones(self, obs, acts) -> np.ndarray:
        """The most probable clone of every step given the steps before it (and its own observation).

        Moves that make pairs of views not registered (the episode being lived, :meth:`place`) are
        filtered under the model with those pairs registered (:meth:`_add_pairs`: their blocks get the
        pseudocount, their rows' M-step is redone), and the model is then put back as it was.
        Pairs are registered at sleeps only: with noisy views nearly every chunk makes a new pair, and a
        model changed between sleeps made the agent rebuild its level 2 for each (half the cost of a life,
        BENCHMARKS.md, "Noise's view pairs bounded")."""
        from ._replay_kernels import put_blocks, take_blocks

        saved = None
        if self._S is not None:
            moves = np.flatnonzero(acts >= 0)
            fro, to = obs[moves - 1], obs[moves]
            new = ~self._has_pair[fro, to]
            if new.any():
                # the M-step of _add_pairs writes the rows of the new pairs' first views on the blocks of
                # the moves from them: those blocks are kept and put back
                first = np.zeros(self._K, dtype=bool)
                first[fro[new]] = True
                on = first[fro]
                blocks = np.unique(fro[on] * self._K + to[on])
                blocks = np.stack([blocks // self._K, blocks % self._K], axis=1)
                saved = (blocks, *take_blocks(self._T, self._Q, blocks, self._starts, self._sizes), self._pairs,
                         self._has_pair.copy(), self._succ, self._pred, self._slip)
                self._add_pairs(obs, acts, refresh=False)
        try:
            d = self._data(obs, acts)
            ll = d.log_likelihood(self._T, self._B)
            if not np.isfinite(ll):  # cannot happen with a positive pseudocount; keep the first clone
                return self._starts[obs]
            return self._starts[obs] + _block_argmax(d.alpha, d.off)
        finally:
            if saved is not None:
                blocks, T, Q, self._pairs, self._has_pair, self._succ, self._pred, self._slip = saved
                put_blocks(self._T, self._Q, blocks, self._starts, self._sizes, T, Q)

    def _connect(self, clusters, states, clones, labels) -> None:
        """Remember the clone of each new level-1 state (true labels ``labels``) and connect it to its
        block's cluster (a new cluster for a block without one)."""
        self._remember(states, clones, labels)
        blocks = self._block[clones]
        cid = self._cluster_of[blocks]
        new = cid < 0
        if new.any():
            fresh, inv = np.unique(blocks[new], return_inverse=True)
            movers = states[new]
            clusters.assignment[movers] = -1   # the agent may have connected them online
            order = np.argsort(inv, kind="stable")
            bounds = np.searchsorted(inv[order], np.arange(len(fresh) + 1))
            ids = clusters.add_clusters([movers[order[bounds[i]:bounds[i + 1]]] for i in range(len(fresh))])
            self._cluster_of[fresh] = ids
            self._block_of = np.concatenate([self._block_of, fresh])
            self._t2 = None
        clusters.assignment[states[~new]] = cid[~new]

    def _remember(self, states, clones, labels) -> None:
        """Level-1 ``states`` (true labels ``labels``) take ``clones`` (a state given twice: its last);
        the per-clone counts follow."""
        from ._replay_kernels import move_states

        states = np.asarray(states, dtype=np.int64)
        self._grow_clone_state(int(states.max()) + 1 if len(states) else 0)
        labels = np.asarray(labels, dtype=np.int64)
        self._label_width = max(self._label_width, int(labels.max()) + 1 if len(labels) else 0)
        self._widen_label_table(self._label_width)
        lab, unlab = (self._clone_lab, self._clone_unlab) if self._clone_lab is not None else _NO_LABELS
        move_states(self._clone_state, states, np.asarray(clones, dtype=np.int64), labels, self._clone_n, lab, unlab)

    def _count_clones(self, memory) -> None:
        """The per-clone counts of :meth:`_remember` from scratch (a fresh or a loaded merger)."""
        self._clone_n = np.zeros(self._H, dtype=np.int64)
        self._clone_lab, self._clone_unlab = np.zeros((self._H, 1), dtype=np.int64), np.zeros(self._H, dtype=np.int64)
        self._label_width = 0
        n = min(self._n_seen, len(self._clone_state))
        known = self._clone_state[:n].copy()
        self._clone_state[:n] = -1
        self._remember(np.arange(n, dtype=np.int64), known, memory.labels[:n])

    def _widen_label_table(self, width: int) -> None:
        """Room for labels below ``width`` in the per-clone label table (dropped above
        :data:`CLONE_LABEL_TABLE_MAX` entries: purity is then counted by the agent from level 1)."""
        lab = self._clone_lab
        if lab is None or width <= lab.shape[1]:
            return
        if self._H * width > CLONE_LABEL_TABLE_MAX:
            self._clone_lab = self._clone_unlab = None
            return
        width = min(max(width, 2 * lab.shape[1]), CLONE_LABEL_TABLE_MAX // self._H)
        self._clone_lab = np.zeros((self._H, width), dtype=np.int64)
        self._clone_lab[:, :lab.shape[1]] = lab

    def _write_clusters(self, clusters, n: int) -> None:
        """C from the clones: every level-1 state in the cluster of its clone's block; clusters numbered
        in the order of their blocks.  One pass over the states: the numbering moves most states' ids at
        every sleep (BENCHMARKS.md, "Cost of a long life"), so there is no smaller set to rewrite."""
        from ._replay_kernels import write_assignment

        self._grow_clone_state(n)
        used = np.flatnonzero(self._held_blocks())
        cluster_of_block = np.full(int(self._block.max()) + 1, -1, dtype=np.int64)
        cluster_of_block[used] = np.arange(len(used))
        rep = write_assignment(clusters.assignment, self._clone_state, n, cluster_of_block[self._block], len(used))
        clusters.rewritten(len(used), rep)   # states from n on are not connected (no clone yet)
        self._block_of = used
        self._cluster_of = np.full(self._H, -1, dtype=np.int64)
        self._cluster_of[used] = np.arange(len(used))
        self._t2 = None

    def _held_blocks(self) -> np.ndarray:
        """Whether each block holds a level-1 state."""
        held = np.zeros(int(self._block.max()) + 1, dtype=bool)
        held[self._block[self._clone_n > 0]] = True
        return held

    def purity(self, memory, clusters):
        """Weighted purity of C with and without singleton clusters (NaN when a connected state has no
        true label), as :func:`~hmmmerge.evaluate.weighted_purity` counts them from level 1, summed from
        the per-clone label counts instead (clones x labels, not the states); None when those are not kept
        (too many labels) or C is not the one this merger wrote (the agent then counts from level 1).

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> p = agent.merger_.purity(agent.memory_, agent.clusters_); 0 < p[0] <= 1
        True
        """
        from ._replay_kernels import clone_purity

        if self._fold is not None:
            return self._fold.purity(memory, clusters)
        if self._A is None or len(self._block_of) != clusters.n_clusters:
            return None
        self._check(memory)
        if self._clone_lab is None:
            return None
        sizes, top, unlabelled = clone_purity(self._clone_n, self._clone_lab, self._clone_unlab,
                                              self._cluster_of[self._block], clusters.n_clusters,
                                              min(self._label_width, self._clone_lab.shape[1]))
        if unlabelled or not sizes.any():
            return float("nan"), float("nan")
        out = []
        for smallest in (1, 2):
            keep = sizes >= smallest
            out.append(float(top[keep].sum() / sizes[keep].sum()) if keep.any() else float("nan"))
        return out[0], out[1]

    def _grow_clone_state(self, top: int) -> None:
        if top > len(self._clone_state):
            grown = np.full(max(top, 2 * len(self._clone_state), 1024), -1, dtype=np.int64)
            grown[:len(self._clone_state)] = self._clone_state
            self._clone_state = grown

    def _init_model(self, rng) -> None:
        """Random transitions on the observed pairs' blocks (rows normalised there), mixed by the slip."""
        from ._replay_kernels import m_step_pairs

        H, A = self._H, self._A
        R = rng.random((A, H, H))
        self._Q, self._T = np.zeros((A, H, H)), np.zeros((A, H, H))
        m_step_pairs(R, self._Q, self._T, self._pairs, self._starts, self._sizes, 1.0, 0.0, self._slip,
                     np.ones(self._K, dtype=np.bool_))
        self._B = np.full(H, 1.0 / H)
        self._C = np.zeros((A, H, H))

    def _add_pairs(self, obs, acts, refresh: bool = True) -> None:
        """Add the observation pairs of the moves of ``(obs, acts)`` that are new; once the model exists,
        redo the M-step of the rows they start from (their blocks get the pseudocount). ``refresh=False``:
        the cached lumped model is kept and the M-step writes those rows on the blocks of the moves' own
        pairs only, all that a filter of these moves reads (:meth:`_filtered_clones` puts the model back
        afterwards; the rest of the rows would be written for nothing: a third of a noisy MiniGrid life)."""
        moves = np.flatnonzero(acts >= 0)
        if not len(moves):
            return
        seen = np.zeros((self._K, self._K), dtype=bool)
        seen[obs[moves - 1], obs[moves]] = True
        made = None if refresh else seen.copy()
        seen &= ~self._has_pair
        if not seen.any():
            return
        new = np.argwhere(seen).astype(np.int64)
        self._pairs = np.concatenate([self._pairs, new])
        self._has_pair |= seen
        self._succ = self._pred = None
        if self._S is not None:
            redo = np.zeros(self._K, dtype=np.bool_)
            redo[new[:, 0]] = True
            self._m_step(redo, pair_on=None if refresh else made[self._pairs[:, 0], self._pairs[:, 1]])
            if refresh:
                self._lumped = None
                self._t2 = None

    def _drop_faded_pairs(self) -> int:
        """Drop the pairs whose kept counts are all at most :data:`PAIR_FLOOR` of the pseudocount at the
        M-step (``window * count``): their blocks are then the pseudocount alone, as for a pair never seen.
        ``S``, ``Q``, ``T`` are zeroed there, the row sums of their first observations summed anew, and
        those rows' M-step redone (the pseudocount of the dropped blocks leaves the rows). Returns the
        pairs dropped.

        A random view makes pairs the world never makes (149 views: 5,304 pairs against 564 on a clean
        MiniGrid life); views read as noise give theirs no counts, so they go at the sleep that
        registered them, and the counts of the others fade with the stepwise decay. A pair seen again
        is registered again (:meth:`_add_pairs`) with the pseudocount block it had."""
        from ._replay_kernels import drop_pairs, faded_pairs

        if self._S is None or not len(self._pairs):
            return 0
        floor = PAIR_FLOOR * float(self.pseudocount) / (float(self.window) * self._g)
        faded = faded_pairs(self._S, self._pairs, self._starts, self._sizes, floor)
        if not faded.any():
            return 0
        redo = drop_pairs(self._S, self._Q, self._T, self._row_sums(), self._pairs, faded, self._starts,
                          self._sizes)
        gone = self._pairs[faded]
        self._has_pair[gone[:, 0], gone[:, 1]] = False
        self._pairs = np.ascontiguousarray(self._pairs[~faded])
        self._succ = self._pred = None
        self._m_step(redo)
        self._lumped = None
        self._t2 = None
        return int(faded.sum())

    def _successors(self):
        if self._succ is None:
            order = np.lexsort((self._pairs[:, 1], self._pairs[:, 0]))
            ptr = np.zeros(self._K + 1, dtype=np.int64)
            ptr[1:] = np.cumsum(np.bincount(self._pairs[:, 0], minlength=self._K))
            self._succ = (ptr, np.ascontiguousarray(self._pairs[order, 1]))
        return self._succ

    def _expected_counts(self, d, start_weight=None, ll=None):
        """E-step into the kept buffer: ``(log P(X), C, Bc)`` (``C`` nonzero on the batch's blocks only);
        ``start_weight``: a weight per episode of ``d`` on its start counts ``Bc`` (None: 1 each); ``ll``:
        the log-likelihood of the forward pass ``d`` already holds under the current ``T`` and ``B`` (it is
        then not run again), or None."""
        if ll is None:
            ll = d.log_likelihood(self._T, self._B)
        Bc = np.zeros(self._H)
        if not np.isfinite(ll):
            return ll, self._C, Bc
        d._backward(self._T)
        order, bounds = d.groups()
        d.K.transition_counts(self._T, d.starts, d.sizes, d.obs, d.acts, d.off, d.alpha, d.bk, order, bounds,
                              self._C)
        flat, states = d._first_blocks()
        c = d.scale[d.first] if start_weight is None else d.scale[d.first] * start_weight
        np.add.at(Bc, states, d.alpha[flat] * d.bk[flat] * np.repeat(c, d._first_len))
        return ll, self._C, Bc

    def sleep(self, memory, clusters, rng=None) -> list[dict]:
        """Stepwise EM over the new and ``replay`` replayed episodes; reconnect their level-1 states.

        ``rng`` draws the initial model (first sleep) and the replayed episodes.
        Returns one report: episodes learned from, replayed, the batch's mean
        log-likelihood per step before the last M-step, clusters.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), sleep_every=10**6, seed=0)
        >>> agent = agent.fit(random_walk(gridworld(), 10, seed=0)); r = agent.sleep()[0]
        >>> r["new"], r["replayed"], r["clusters"] == agent.n_clusters_ > 0, r["phase"]
        (9, 0, True, 'replay')

        In the exact phase (``exact=True``, clean data so far) the fold sleeps instead, and the report is its
        own (:meth:`hmmmerge.fold.FoldMerger.sleep`) with ``phase="exact"``; when the fold's work outgrows
        its budget, the phase ends and this merger's first sleep follows at once (its report after the
        fold's, ``exact_ended="work"``):

        >>> agent = TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld(), 30, seed=0))
        >>> r = agent.sleep()[0]; r["phase"], r["clusters"] == agent.n_clusters_
        ('exact', True)
        """
        self._check(memory)
        if self._fold is None:
            return [dict(self._sleep_replay(memory, clusters, rng), phase="replay")]
        from .fold._kernels import PRICE, PRICE_LIMIT, WORK, WORK_LIMIT
        from .fold.exact import WorkLimitReached

        fold = self._fold
        # postponed, as replay's sleeps are, and further as the life grows: a fold's sleep passes over all of
        # level 1 (its link counts, C), so it sleeps after a share of the episodes lived (its cost per episode
        # then stays bounded: EXACT_SLEEP_SHARE)
        if fold._A is not None and self._since_fold < max(int(self.min_new), self._lived // EXACT_SLEEP_SHARE):
            return [{"phase": "exact", "postponed": True, "clusters": clusters.n_clusters}]
        new, self._since_fold = self._since_fold, 0
        fold._check(memory)
        budget, priced = EXACT_SLEEP_WORK, -1
        if self._lived <= EXACT_WORK_EPISODES:
            budget = min(budget, EXACT_WORK_BASE + EXACT_WORK_PER_STEP * self._steps - self._work)
        else:   # late: priced work in proportion to the steps since the fold's last sleep (a count, as the episodes')
            priced = max(EXACT_LATE_PRICE_PER_STEP * (new * self._steps // max(self._lived, 1)), 0)
        sc = fold._st.sc
        start, pstart = int(sc[WORK]), int(sc[WORK] + sc[PRICE])
        sc[WORK_LIMIT] = start + max(budget, 0) + 1   # the sleep stops once it passes a budget
        if priced >= 0:
            sc[PRICE_LIMIT] = pstart + priced + 1
        stopped = False
        try:
            report = dict(fold.sleep(memory, clusters, rng)[0], phase="exact")
        except WorkLimitReached:   # the fold is left mid-sleep: the phase ends whatever the counts say
            report, stopped = {"phase": "exact", "clusters": clusters.n_clusters}, True
        sc = fold._st.sc
        sc[WORK_LIMIT], sc[PRICE_LIMIT] = 0, 0
        spent, pspent = int(sc[WORK]) - start, int(sc[WORK] + sc[PRICE]) - pstart
        self._work += spent
        if not stopped and spent <= budget and (priced < 0 or pspent <= priced):
            return [report]
        self._end_exact(clusters, EXACT_REASONS.index("work"), memory.n_states)
        report["exact_ended"] = "work"
        return [report, dict(self._sleep_replay(memory, clusters, rng), phase="replay")]

    def _sleep_replay(self, memory, clusters, rng) -> dict:
        """Stepwise EM's sleep (:meth:`sleep` after the exact phase); its report. The first sleep after an exact
        phase learns the buffered episodes as the sleeps of a life without the phase would have: ``min_new``
        new ones at a time (the rest with the last), in order (``catch_up``: the sleeps made)."""
        shared = self._T is None and self._waits_for_sample()
        if shared:
            # the clones are shared by the visits of a sample of ALLOC_STEPS x H steps
            new = self._episodes[len(self._episodes) - self._n_new:]
            if sum(len(e[0]) for e in new) < ALLOC_STEPS * self._H:
                return {"new": self._n_new, "replayed": 0, "log_likelihood_per_step": float("nan"),
                        "clusters": clusters.n_clusters, "postponed": True}
            self._allocate(np.concatenate([e[0] for e in new]), memory, sample=True)
        chunk = max(int(self.min_new), 1) * self._sleep_factor()   # after the layout: it depends on it
        if self._T is not None or self._exact_end is None or self._exact_end[0] == 0 or self._n_new <= chunk:
            return self._sleep_once(memory, clusters, rng, allocate=not shared)
        eps, n = self._episodes, self._n_new
        base = len(eps) - n
        stops = [base + chunk * (i + 1) for i in range(n // chunk - 1)] + [len(eps)]   # the rest joins the last
        try:
            last = base
            for stop in stops:
                self._episodes, self._n_new = eps[:stop], stop - last
                report = self._sleep_once(memory, clusters, rng, allocate=not shared)
                last = stop
        finally:
            self._episodes = eps
        return dict(report, new=n, catch_up=len(stops))

    def _sleep_once(self, memory, clusters, rng, allocate: bool = True) -> dict:
        """One sleep of stepwise EM (see :meth:`sleep`); the first one shares the clones by the batch's visits
        unless ``allocate`` is False (:meth:`_sleep_replay` shared them by a larger sample)."""
        from ._random import as_generator
        from ._replay_kernels import absorb_counts

        rng = as_generator(0 if rng is None else rng)
        clusters.grow(memory.n_states)
        n_new = self._n_new
        report = {"new": n_new, "replayed": 0, "log_likelihood_per_step": float("nan"), "clusters": clusters.n_clusters}
        factor = self._sleep_factor()
        if n_new == 0 or (n_new < int(self.min_new) * factor and self._T is not None):
            return dict(report, postponed=n_new > 0)
        n_old = len(self._episodes) - n_new
        n_replay = int(self.replay) * factor
        start_weight = None
        if n_old and self.priority and self._S is not None:
            pr = self._replay_priority(n_old)
            picks = rng.choice(n_old, size=min(n_replay, n_old), p=pr / pr.sum())
            # episodes drawn by rarity are not a sample of where episodes start: the start counts come from
            # the new episodes alone, weighted up to the batch's size (random starts: BENCHMARKS.md, "Clean
            # large grids, session 11")
            start_weight = np.concatenate([np.full(n_new, (n_new + len(picks)) / n_new), np.zeros(len(picks))])
        else:
            picks = rng.integers(0, n_old, size=min(n_replay, n_old)) if n_old else np.zeros(0, dtype=np.int64)
        batch = [self._episodes[i] for i in np.concatenate([np.arange(n_old, len(self._episodes)), picks]).tolist()]
        obs = np.concatenate([b[0] for b in batch])
        acts = np.concatenate([b[1] for b in batch])
        self._add_pairs(obs, acts)
        if self._T is None:
            if allocate:   # else shared by :meth:`_sleep_replay`
                self._allocate(obs, memory)
            self._init_model(rng)
        d = self._data(obs, acts)
        # the rate of random views is estimated from the first update on, but in the first NOISE_AFTER
        # updates no view is replaced: an unlearned model's surprises look like noise, and views repaired
        # towards its predictions would confirm its mistakes
        # the noise look-ahead runs the forward pass of ``d`` under the model of the first E-step (``known``)
        # on slow-sleeping models and on big models of many clones per view the look-ahead is thinned while
        # the views look clean (NOISE_SKIP_RATE, NOISE_SKIP_CLONES)
        thin = (factor > 1 or (self._H > NOISE_SKIP_CLONES and self._H >= NOISE_SKIP_PER_VIEW * self._K)) \
            and self._updates >= NOISE_AFTER and self._noise < NOISE_SKIP_RATE \
            and self._noise_idle < NOISE_SKIP_EVERY - 1
        self._noise_idle = self._noise_idle + 1 if thin else 0
        look = self._updates and not thin
        noise, repaired, known = self._views_read_as_noise(d, obs, acts) if look else (None, 0, None)
        known = None if repaired else known
        if repaired:
            self._add_pairs(noise, acts)
            d = self._data(noise, acts)
        ll = np.nan
        # the batch's counts fall on the blocks of the pairs it made (``on``): only those take new counts.
        # Until the last iteration, the M-step writes T and Q on those pairs only: until the next M-step
        # nothing reads the others (the E-step and absorb_counts read the batch's pairs), and the last
        # iteration's M-step writes them all
        on = self._pairs_in(d)
        for it in range(self._n_iter):
            ll, C, Bc = self._expected_counts(d, start_weight, ll=known if it == 0 else None)
            if not np.isfinite(ll):
                raise ValueError("replayed episodes have probability 0 under level 2 (pseudocount too small?)")
            eta = (self._updates + 2.0) ** -float(self.step_exponent)
            first = self._S is None
            if first:
                self._S, self._Sb, self._Sslip = np.zeros_like(C), np.zeros(self._H), 0.0
                self._Z, self._g = np.zeros((self._A, self._H)), 1.0
            keep, add = (0.0, 1.0 / len(batch)) if first else (1.0 - eta, eta / len(batch))
            # S <- keep * S + add * counts, as the scale g <- keep * g and S/g <- S/g + add / g * counts
            if not first:
                self._g *= keep
                if self._g < SCALE_FLOOR:
                    self._rescale()
            # a row whose counts all stay under COUNT_FLOOR of the pseudocount at the M-step only decays
            floor = COUNT_FLOOR * float(self.pseudocount) / (float(self.window) * add)
            vm = (np.zeros((self._A, self._H)), np.zeros((self._A, self._H))) \
                if self.slip_floor and self._slip > 0.0 else None
            slipped = absorb_counts(self._S, C, self._Q, self._Z, self._pairs, on, self._starts,
                                    self._sizes, self._slip, add / self._g, floor, vm)
            if vm is not None:
                if self._Soff is None or self._Soff.shape != vm[0].shape:
                    self._Soff, self._Stot = np.zeros_like(vm[0]), np.zeros_like(vm[0])
                self._Soff = keep * self._Soff + add * (vm[1] - vm[0])
                self._Stot = keep * self._Stot + add * vm[1]
            self._Sb *= keep
            self._Sb += add * Bc
            self._Sslip = keep * self._Sslip + add * slipped
            self._var = (1.0 - eta) ** 2 * self._var + eta ** 2 / len(batch) if self._updates else 1.0 / len(batch)
            self._updates += 1
            self._m_step(pair_on=on if it + 1 < self._n_iter else None)
        n_split = self._split(d) if self.split else 0
        n_grown = self._grow(memory) if self.split else 0
        if n_grown:
            d = self._data(obs, acts)
        self._since_deep += n_new
        deep = 0
        if self._n_deep and self._since_deep >= max(int(self.window) // 2, 1):
            deep = self._deep_sleep()
        elif self._mid and self._since_deep >= max(int(self.window), 1):
            deep = self._deep_sleep(LIGHT_DEEP_ITER)
        elif self._since_deep >= max(int(self.window) // 2, 1) and self._long_memory():
            deep = self._deep_sleep(LONG_MEMORY_ITER, noise=False)
        self._n_new = 0
        # the batch's level-1 states take their most probable clone under the new model; clones are
        # lumped into blocks; C is written from the blocks
        if repaired:
            d = self._data(obs, acts)
        d.log_likelihood(self._T, self._B)
        clones = self._starts[obs] + _block_argmax(d.alpha, d.off)
        states = np.concatenate([b[2] for b in batch])
        self._remember(states, clones, memory.labels[states])
        # pairs are dropped after the batch's raw views are filtered (the pairs only they make are registered)
        n_dropped = self._drop_faded_pairs()
        self._lump()
        self._fold_unheld()
        self._write_clusters(clusters, memory.n_states)
        report.update(replayed=len(picks), noise_look_ahead=bool(look), views_read_as_noise=int(repaired),
                      clones_split=n_split, clones_grown=n_grown, deep_episodes=deep, pairs_dropped=n_dropped,
                      noise_rate=self._noise,
                      log_likelihood_per_step=float(ll) / len(obs), clusters=clusters.n_clusters)
        return report

    def _long_memory(self) -> bool:
        """Whether the buffer is long and re-counted by deep sleeps (:data:`LONG_MEMORY_WINDOW`): random starts
        seen (:meth:`_starts_spread`) on a model too large for the other deep sleeps, ``deep=None``, of at most
        :data:`ALLOC_MANY_VIEWS` views (MiniGrid's many views: no gain measured, 0.6-0.8 s more)."""
        return self._T is not None and self._long_memory_size() and self._starts_spread()

    def _long_memory_size(self) -> bool:
        """The size gates of :meth:`_long_memory`: ``deep=None``, no deep nor light deep sleeps, more than
        :data:`LIGHT_DEEP_MAX_CLONES` clones, at most :data:`ALLOC_MANY_VIEWS` views."""
        return (self.deep is None and not self._n_deep and not self._mid
                and self._H > LIGHT_DEEP_MAX_CLONES and self._K <= ALLOC_MANY_VIEWS)

    def _deep_sleep(self, n_iter: int | None = None, noise: bool = True) -> int:
        """Batch EM over every buffered episode, ``n_iter`` iterations (None: :attr:`n_deep_`; a light deep
        sleep: :data:`LIGHT_DEEP_ITER`) from the current model, the kept
        counts at every iteration ``(1 - DEEP_MIX)`` those before the deep sleep plus ``DEEP_MIX`` the
        buffer's expected counts per episode (:data:`DEEP_MIX`); returns the episodes learned from.

        Stepwise EM learns slowly where many places look alike: every update moves the kept counts a step
        ``eta`` towards the batch's, and on a 3-colour torus the model needed three times EM's 1,000 episodes
        to reach EM's accuracy (BENCHMARKS.md, "Few-colour worlds under slips, session 11").  Longer memory
        (a smaller ``eta``) keeps the counts of older, worse models; more iterations per sleep forget faster.
        A deep sleep re-counts the whole buffer under the current model, so most kept counts rest on
        ``window`` episodes counted under one model, as batch EM's do (all of them: the model overfits the
        buffer where slips spread the rows).  Its work is ``window`` episodes x
        :attr:`n_deep_` passes, once every ``window // 2`` episodes: bounded, and only on small models.
        From random starts on large models the buffer is :data:`LONG_MEMORY_WINDOW` episodes and the deep
        sleep runs without the noise look-ahead (``noise=False``: the buffer's views are taken as seen).

        With at most :data:`FEW_VIEWS` views it runs over the last :data:`FEW_VIEW_DEEP_EPISODES` episodes
        and moves the kept counts a share :data:`FEW_VIEW_DEEP_MIX` towards theirs, in at most as many passes
        as over the buffer (:meth:`_long_deep_iterations`)."""
        from ._replay_kernels import absorb_counts

        eps = self._episodes
        mix = float(DEEP_MIX)
        obs = np.concatenate([e[0] for e in eps])
        acts = np.concatenate([e[1] for e in eps])
        self._add_pairs(obs, acts)   # pairs dropped as faded come back with the buffer's raw views ...
        d = self._data(obs, acts)
        # ... and the views read as noise are replaced, as at every sleep (the pairs only they make then take
        # no counts and are dropped again at the end of the sleep)
        views, repaired, known = self._views_read_as_noise(d, obs, acts, update=False) if noise else (obs, 0, None)
        known = None if repaired else known
        if repaired:
            self._add_pairs(views, acts)
            d = self._data(views, acts)
        n, pieces = len(eps), None
        if self._long_deep and n_iter is None and self._old:
            # the older episodes as the deep sleeps read them while they were buffered (their views read as
            # noise replaced then: not looked ahead again), before the buffer as read now
            read = views if repaired else obs
            cuts = np.cumsum([len(e[0]) for e in eps])[:-1]
            self._read[:len(eps)] = np.split(read, cuts) if repaired else [None] * len(eps)
            obs = np.concatenate([e[0] for e in self._old] + [read])
            acts = np.concatenate([e[1] for e in self._old] + [acts])
            self._add_pairs(obs, acts)
            known, n = None, len(self._old) + len(eps)
            # the E-step over pieces of ``window`` episodes, their counts summed: the same counts, but each
            # piece's forward, backward and counts stay in the cache (over 1,000 episodes at once the counts'
            # passes by view pair read the steps far apart)
            ends = np.cumsum([len(e[0]) for e in self._old] + [len(e[0]) for e in eps])
            cut = np.concatenate([[0], ends[max(int(self.window), 1) - 1::max(int(self.window), 1)], ends[-1:]])
            cut = np.unique(cut)
            pieces = [self._data(obs[a:b], acts[a:b]) for a, b in zip(cut[:-1].tolist(), cut[1:].tolist())]
        elif self._long_deep and n_iter is None:
            self._read[:len(eps)] = np.split(views, np.cumsum([len(e[0]) for e in eps])[:-1]) if repaired \
                else [None] * len(eps)
        if self._long_deep and n_iter is None:
            n_iter, mix = self._long_deep_iterations(n), float(FEW_VIEW_DEEP_MIX)
        on = np.ones(len(self._pairs), dtype=np.bool_)
        floor = COUNT_FLOOR * float(self.pseudocount) * n / (float(self.window) * mix)
        kept = (self._g * (1.0 - mix)) * self._S, (self._g * (1.0 - mix)) * self._row_sums(), \
            (1.0 - mix) * self._Sb, (1.0 - mix) * self._Sslip
        for it in range(self._n_deep if n_iter is None else int(n_iter)):
            if pieces is None:
                ll, C, Bc = self._expected_counts(d, ll=known if it == 0 else None)
            else:   # the pieces' counts accumulate in the E-step's buffer C
                ll, Bc = 0.0, np.zeros(self._H)
                for piece in pieces:
                    part, C, b = self._expected_counts(piece)
                    ll, Bc = ll + part, Bc + b
            if not np.isfinite(ll):
                raise ValueError("buffered episodes have probability 0 under level 2 (pseudocount too small?)")
            self._S[:] = kept[0]
            self._Z[:] = kept[1]
            self._g = 1.0
            slipped = absorb_counts(self._S, C, self._Q, self._Z, self._pairs, on, self._starts, self._sizes,
                                    self._slip, mix / n, floor)
            self._Sb[:] = kept[2] + mix * Bc / n
            self._Sslip = kept[3] + mix * slipped / n
            self._m_step()
        self._var = (1.0 - mix) ** 2 * self._var + mix ** 2 / n
        self._since_deep = 0
        return n

    def _long_deep_iterations(self, n_episodes: int) -> int:
        """Iterations of a deep sleep over ``n_episodes`` episodes with at most :data:`FEW_VIEWS` views: at most
        the passes of :attr:`n_deep_` iterations over ``window`` episodes, at least
        :data:`FEW_VIEW_DEEP_MIN_ITER` and at most :attr:`n_deep_`.

        >>> m = ReplayMerger(); m._n_deep = 13
        >>> [m._long_deep_iterations(n) for n in (100, 200, 500, 1000, 2000)]
        [13, 13, 5, 2, 2]
        """
        passes = self._n_deep * max(int(self.window), 1)
        return int(min(self._n_deep, max(FEW_VIEW_DEEP_MIN_ITER, passes // max(int(n_episodes), 1))))

    def _replay_priority(self, n_old: int) -> np.ndarray:
        """The weight of each of the first ``n_old`` buffered episodes in the replay draw:
        ``sum_t 1 / (v(b_t) + f)`` over its steps, ``b_t`` the block (lumped clones, :meth:`_lump`) of the clone
        of step ``t``'s level-1 state, ``v`` the expected visits of a block per episode (the kept counts of its
        clones, :meth:`_weights`), ``f`` :data:`PRIORITY_FLOOR` times the mean visits of a clone that holds
        level-1 states (a step without a clone counts as a block never visited).

        Drawn uniformly, a clone's replayed visits follow its visits: a place seen in one episode of a
        hundred is replayed about once in five sleeps, and in between stepwise EM decays its kept counts
        with every update, so its row rests on the last visit or two, counted under an older model
        (BENCHMARKS.md, "Clean large grids, session 10"). Drawn with this weight, a step counts in inverse
        proportion to the visits of its place as level 2 sees it, so the replayed visits are spread over
        the places more evenly. The block, not the clone: a spurious duplicate (a clone that a slip or an
        aliased patch made, lumped with the clone of its place) weighs as its place does, so it is not
        replayed back to life; and the floor bounds a step's weight at ``1 / f``, so that a few rarely
        visited clones do not take every draw (session 11: with the clone and a floor of one visit in the
        buffer, the 3-colour torus lost 0.025).

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> m = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 40, seed=0)).merger_
        >>> n = len(m._episodes); p = m._replay_priority(n); bool(p.shape == (n,) and (p > 0).all())
        True
        """
        eps = self._episodes[:n_old]
        states = np.concatenate([e[2] for e in eps])
        cs = self._clone_state
        clone = np.where(states < len(cs), cs[np.minimum(states, len(cs) - 1)], -1) if len(cs) else \
            np.full(len(states), -1)
        w = self._weights()
        used = self._clone_n > 0
        floor = PRIORITY_FLOOR * float(w[used].mean()) if used.any() and w[used].sum() > 0 else 1.0 / n_old
        v = np.bincount(self._block, weights=w)[self._block]   # the visits of each clone's block
        per_step = 1.0 / (np.where(clone >= 0, v[np.maximum(clone, 0)], 0.0) + floor)
        cuts = np.concatenate([[0], np.cumsum([len(e[2]) for e in eps])[:-1]]).astype(np.int64)
        return np.add.reduceat(per_step, cuts)

    def _split(self, d) -> int:
        """Split the clones whose visits came in two ways with different futures; returns the splits made.

        The evidence: every step of the batch (its most probable clone under the
        E-step's posteriors, ``d`` holds them) as a triple (clone, how it came in:
        action and previous clone, or the episode's start; what followed: action
        and next view), counted over the sleeps with the weight of older sleeps
        multiplied by :data:`SPLIT_MEMORY` (:data:`SPLIT_MEMORY_MID` on models of light deep sleeps,
        see :data:`LIGHT_DEEP_MAX_CLONES`; :data:`LONG_MEMORY_SPLIT_MEMORY` on models of long memory;
        :meth:`_split_memory`) at each one.  Per clone with at least
        :data:`SPLIT_MIN_VISITS` visits, :func:`~hmmmerge._replay_kernels.split_tests`
        parts its ways in into two groups with different futures; when the
        likelihood-ratio statistic exceeds ``split``, the kept counts into the
        clone from the second group's ways move to a spare clone of its view
        (:meth:`_spare`), and its counts out are shared by each group's share of
        the visits followed by each (action, view).  EM then goes on from there:
        a local optimum where two places share a clone (the stepwise updates
        never split it) is left at once.
        """
        from ._replay_kernels import split_tests

        H, A, K = self._H, self._A, self._K
        post = d.alpha * d.bk * np.repeat(d.scale, d.sizes[d.obs])
        clone = self._starts[d.obs] + _block_argmax(post, d.off)
        acts, obs = d.acts, d.obs
        t = np.flatnonzero(acts[1:] >= 0)          # steps followed by a move of the same episode
        way_in = np.where(acts[t] < 0, A * H, acts[t] * H + clone[np.maximum(t - 1, 0)])
        code = (clone[t] * (A * H + 1) + way_in) * (A * K) + acts[t + 1] * K + obs[t + 1]
        weight = np.ones(len(code))
        if self._evidence is not None:
            code = np.concatenate([self._evidence[0], code])
            weight = np.concatenate([self._evidence[1] * self._split_memory(), weight])
        code, inv = np.unique(code, return_inverse=True)
        count = np.bincount(inv, weights=weight)
        kept = count >= 0.05   # forgotten below a twentieth of a visit
        code, count = code[kept], count[kept]
        of = code // ((A * H + 1) * (A * K))
        way_in = (code // (A * K)) % (A * H + 1)
        after = code % (A * K)
        clones, first = np.unique(of, return_index=True)
        seg = np.concatenate([first, [len(code)]]).astype(np.int64)
        G, group = split_tests(seg, way_in, after, count, A * K, float(SPLIT_MIN_VISITS))
        w = self._weights().copy()
        touched = np.zeros(H, dtype=bool)
        n_split = 0
        lumped = np.bincount(self._block, minlength=H)[self._block] > 1   # clones with mates (see _spare)
        self._wanting = np.zeros(K, dtype=np.int64)   # splits per view that found no spare (see _grow)
        for c in np.argsort(-G, kind="stable").tolist():
            if not self.split or G[c] <= float(self.split):
                break
            h = int(clones[c])
            if touched[h]:
                continue
            j = self._spare(h, w, touched, lumped)
            if j < 0:
                self._wanting[self._colour[h]] += 1
                continue
            rows = slice(seg[c], seg[c + 1])
            ways, second, nxt, n = way_in[rows], group[rows] == 1, after[rows], count[rows]
            for k in np.unique(ways[second]).tolist():
                if k == A * H:
                    self._Sb[j] += self._Sb[h]
                    self._Sb[h] = 0.0
                else:
                    a, i = divmod(k, H)
                    self._S[a, i, j] += self._S[a, i, h]
                    self._S[a, i, h] = 0.0
            n2 = np.bincount(nxt, weights=n * second, minlength=A * K).reshape(A, K)
            n1 = np.bincount(nxt, weights=n * ~second, minlength=A * K).reshape(A, K)
            share = ((n2 + 0.05) / (n1 + n2 + 0.1))[:, self._colour]   # (A, H): by the next clone's view
            self._S[:, j, :] = self._S[:, h, :] * share
            self._S[:, h, :] -= self._S[:, j, :]
            touched[[h, j]] = True
            n_split += 1
        if n_split:
            stale = touched[of]   # the evidence of the clones changed is forgotten
            code, count = code[~stale], count[~stale]
            self._lumped = None
            self._m_step_lines(np.flatnonzero(touched))
        self._evidence = (code, count)
        return n_split

    def _split_memory(self) -> float:
        """The factor of the split evidence of earlier sleeps at each sleep: :data:`SPLIT_MEMORY`,
        :data:`SPLIT_MEMORY_MID` on models of light deep sleeps, :data:`LONG_MEMORY_SPLIT_MEMORY` on models of the
        long memory's size from random starts (:meth:`_long_memory_size`, :meth:`_random_starts`: the buffer's first
        views, so that a life whose exact phase ended by "start" at once stays the life without the phase)."""
        if self._mid:
            return SPLIT_MEMORY_MID
        return LONG_MEMORY_SPLIT_MEMORY if self._long_memory_size() and self._random_starts() else SPLIT_MEMORY

    def _growable(self, K: int) -> bool:
        """Whether a model of ``K`` views may grow past the even layout (:data:`GROW_VIEW_CAP`): ``n_clones=None``,
        deep sleeps by size, more than :data:`FEW_VIEWS` views.

        >>> [ReplayMerger()._growable(k) for k in (3, 4, 5)], ReplayMerger(n_clones=30)._growable(4)
        ([False, True, False], False)
        """
        even = self._clones_per_observation(K)
        return self.n_clones is None and K > FEW_VIEWS and K * even <= DEEP_MAX_CLONES and even < GROW_VIEW_CAP

    def _random_starts(self) -> bool:
        """More than :data:`LONG_MEMORY_START_SHARE` of the buffered episodes start with another view than the
        most common first view."""
        first = np.fromiter((e[0][0] for e in self._episodes), dtype=np.int64, count=len(self._episodes))
        return len(first) > 0 and len(first) - np.bincount(first).max() > LONG_MEMORY_START_SHARE * len(first)

    def _grow(self, memory) -> int:
        """Views whose splits found no spare clone at the last :meth:`_split` get that many clones more (at
        least :data:`GROW_STEP`), on random starts (:meth:`_random_starts`) after :data:`GROW_AFTER` updates, up to
        :data:`GROW_VIEW_CAP` each; returns the clones added. The new clones have no kept counts (spares for the
        next sleep's splits); every per-clone array is carried over to the new indices."""
        want, self._wanting = self._wanting, None
        if want is None or not want.any() or not self._growable(self._K) or self._updates < GROW_AFTER or not self._random_starts():
            return 0
        add = np.clip(np.where(want > 0, np.maximum(want, GROW_STEP), 0), 0, GROW_VIEW_CAP - self._sizes)
        if not add.any():
            return 0
        A, K, H0 = self._A, self._K, self._H
        old_starts, old_colour = self._starts.copy(), self._colour.copy()
        self._layout(self._sizes + add)
        H = self._H
        idx = np.arange(H0) + (self._starts - old_starts)[old_colour]

        def cols(x, fill=0.0):
            y = np.full(x.shape[:-1] + (H,), fill, dtype=x.dtype)
            y[..., idx] = x
            return y

        def square(x):
            y = np.zeros((A, H, H), dtype=x.dtype)
            y[:, idx[:, None], idx[None, :]] = x
            return y

        self._S, self._Q, self._T = square(self._S), square(self._Q), square(self._T)
        self._C = np.zeros((A, H, H))
        self._Z, self._Sb = cols(self._Z), cols(self._Sb)
        if self._Soff is not None:
            self._Soff, self._Stot = cols(self._Soff), cols(self._Stot)
        n = min(self._n_seen, len(self._clone_state))
        cs = self._clone_state[:n]
        cs[cs >= 0] = idx[cs[cs >= 0]]
        if self._evidence is not None:   # (clone, way in, what followed) codes re-encoded for H clones
            code, count = self._evidence
            after = code % (A * K)
            way_in = (code // (A * K)) % (A * H0 + 1)
            of = code // ((A * H0 + 1) * (A * K))
            a, prev = np.divmod(way_in, H0)
            way_in = np.where(way_in == A * H0, A * H, a * H + idx[np.minimum(prev, H0 - 1)])
            self._evidence = ((idx[of] * (A * H + 1) + way_in) * (A * K) + after, count)
        self._lumped = self._t2 = self._succ = self._pred = None
        self._m_step()
        self._count_clones(memory)
        return int(add.sum())

    def _spare(self, h: int, w, touched, lumped=None) -> int:
        """A clone of ``h``'s view to split ``h`` into, or -1: an unused one (expected visits at most 5% of
        ``h``'s), else the least visited one that the last lumping found in a block with other clones (a
        duplicate), its kept counts first folded into the mate whose future is nearest its own (L1 distance
        of the next-block distributions, summed over actions, as :meth:`_fold_unheld` measures it).
        Stepwise EM spreads a place over several clones of its view: without the duplicates freed, a view
        whose clones are all in use could not split a clone that holds two places; and a block (lumped by
        a tolerant test) may hold clones of two places, of which the nearest future is the spare's place
        (BENCHMARKS.md, "Spares from duplicates"). ``lumped``: per clone, whether its block holds other clones
        (the blocks do not change within a :meth:`_split`: a clone alone in its block has no mate, and the search
        skips it without scanning the blocks; the same spare as without it)."""
        v = self._colour[h]
        lo, n_v = self._starts[v], self._sizes[v]
        for j in (lo + np.argsort(w[lo:lo + n_v], kind="stable")).tolist():
            if j == h or touched[j]:
                continue
            if w[j] <= 0.05 * w[h]:
                return j
            if lumped is not None and not lumped[j]:
                continue
            mates = np.flatnonzero((self._block == self._block[j]) & ~touched)
            mates = mates[(mates != j) & (mates != h)]
            if not len(mates):
                continue
            t = int(mates[np.argmin(self._future_distance(j, mates))])
            self._S[:, :, t] += self._S[:, :, j]
            self._S[:, :, j] = 0.0
            self._S[:, t, :] += self._S[:, j, :]
            self._S[:, j, :] = 0.0
            self._Sb[t] += self._Sb[j]
            self._Sb[j] = 0.0
            w[t] += w[j]
            touched[t] = True
            return j
        return -1

    def _future_distance(self, j: int, others) -> np.ndarray:
        """``sum_a || P_a(j) - P_a(o) ||_1`` for each clone ``o`` of ``others``, ``P_a(c)`` the distribution of
        the block of the next clone after an ``a`` from ``c`` (under ``T``)."""
        order = np.argsort(self._block, kind="stable")
        bounds = np.flatnonzero(np.diff(self._block[order], prepend=-1))
        P = np.add.reduceat(self._T[:, np.concatenate([[j], others])][:, :, order], bounds, axis=2)
        return np.abs(P[:, 1:] - P[:, :1]).sum(axis=(0, 2))

    def _views_read_as_noise(self, d, obs, acts, update: bool = True):
        """Estimate the rate of random views and replace the views that are more likely random than not.

        Evidence per step (:func:`~hmmmerge._replay_kernels.noise_odds`): the next ``NOISE_HORIZON``
        views under the belief that skips the view against the belief that takes it (for the views
        level 2 gave less than 1/2; for the others the two beliefs are taken to agree).  The rate ``q``
        is the fixed point of ``q = mean_t P(random | evidence_t, q)``, kept as a running average like
        the statistics; a view whose posterior exceeds 1/2 is replaced by the view the skip belief
        expects (for this sleep's EM only; level 1 keeps what was seen).  Returns ``(views, count, log P)``,
        ``log P`` of the forward pass it ran (which ``d`` holds).
        ``update=False`` (a deep sleep's buffer, most of it read at earlier sleeps): the kept rate is the
        prior, and it is not updated.
        """
        from ._replay_kernels import noise_odds

        ll = d.log_likelihood(self._T, self._B)
        if not np.isfinite(ll):
            return None, 0, ll
        log_odds, expected = noise_odds(self._T, d.starts, d.sizes, d.obs, d.acts, d.off, d.alpha, d.scale,
                                        NOISE_HORIZON, self._K, 0.5, *self._successors())
        moves = np.isfinite(log_odds)
        lo = np.clip(log_odds[moves], -700.0, 700.0)
        q = 0.05 if update else self._noise
        for _ in range(50 if update else 0):
            q = min(float(np.mean(1.0 / (1.0 + (1.0 - q) / q * np.exp(-lo)))), NOISE_MAX) if len(lo) else 0.0
            if q <= 1e-12:
                q = 0.0
                break
        if update:
            # one sleep's estimate rests on thousands of views: a short average (half from this sleep) is
            # enough, and forgets the early sleeps, whose unlearned model reads surprises as noise
            eta = max((self._updates + 2.0) ** -float(self.step_exponent), 0.5)
            self._noise = (1.0 - eta) * self._noise + eta * q
        post = np.zeros(len(obs))
        if q > 0.0:
            post[moves] = 1.0 / (1.0 + (1.0 - q) / q * np.exp(-lo))
        swap = (post > 0.5) & (expected != obs) & (self._updates >= NOISE_AFTER)
        if not swap.any():
            return None, 0, ll
        views = obs.copy()
        views[swap] = expected[swap]
        return views, int(swap.sum()), ll

    def _pairs_in(self, d) -> np.ndarray:
        """Whether each observation pair is made by a move of the batch ``d``."""
        moves = np.flatnonzero(d.acts >= 0)
        seen = np.zeros((self._K, self._K), dtype=bool)
        seen[d.obs[moves - 1], d.obs[moves]] = True
        return seen[self._pairs[:, 0], self._pairs[:, 1]]

    def _m_step(self, redo=None, pair_on=None) -> None:
        """``Q`` from the kept counts (pseudocount on the observed pairs' blocks), the slip share
        ``e = slipped / all`` kept moves (``slip_floor=True``: at least the share the recorded moves show,
        :func:`slip_share_floor`, at most the initial share ``slip``: EM alone lets ``Q`` absorb the slips and
        ``e`` fall to 0, BENCHMARKS.md "The slip share's floor, session 12"), ``T = (1 - e) Q + e mean_b Q_b``;
        rows of the observations in ``redo`` only (default all).  ``pair_on``: write ``Q`` and ``T`` on the
        blocks of these pairs only (see :func:`~hmmmerge._replay_kernels.m_step_pairs`)."""
        from ._replay_kernels import m_step_pairs

        scale, pc = float(self.window), float(self.pseudocount)
        if self._slip > 0.0:
            total = self._kept_sums()[1]
            if total > 0:
                e = self._Sslip / total
                if self.slip_floor and self._Soff is not None:
                    e = max(e, min(slip_share_floor(self._Soff, self._Stot, self._A), float(self.slip)))
                self._slip = min(e, 0.99)
        m_step_pairs(self._S, self._Q, self._T, self._pairs, self._starts, self._sizes, scale * self._g, pc,
                     self._slip, np.ones(self._K, dtype=np.bool_) if redo is None else redo, self._row_sums(),
                     np.zeros(0, dtype=np.bool_) if pair_on is None else pair_on)
        if redo is None:
            B = self._Sb * scale + pc
            self._B = B / B.sum()

    def _m_step_lines(self, clones) -> None:
        """The M-step after kept counts moved between clones of one view (:meth:`_split`): the rows and the
        columns of ``clones`` only (the other entries and the row sums of the other rows are unchanged;
        the slip share too: moves keep the total)."""
        from ._replay_kernels import m_step_lines

        if self._pred is None:
            order = np.lexsort((self._pairs[:, 0], self._pairs[:, 1]))
            ptr = np.zeros(self._K + 1, dtype=np.int64)
            ptr[1:] = np.cumsum(np.bincount(self._pairs[:, 1], minlength=self._K))
            self._pred = (ptr, np.ascontiguousarray(self._pairs[order, 0]))
        m_step_lines(self._S, self._Q, self._T, self._row_sums(), np.asarray(clones, dtype=np.int64), self._colour,
                     self._starts, self._sizes, *self._successors(), *self._pred,
                     float(self.window) * self._g, float(self.pseudocount), self._slip)
        B = self._Sb * float(self.window) + float(self.pseudocount)
        self._B = B / B.sum()

    def _rescale(self) -> None:
        """Fold the scale ``g`` into the kept counts (``g`` near the float range's end; the model is the same)."""
        self._S *= self._g
        self._Z *= self._g
        self._g = 1.0

    def _row_sums(self) -> np.ndarray:
        """``S.sum(axis=2)`` without the scale (kept as ``S`` changes; summed anew when unknown)."""
        from ._replay_kernels import row_sums

        if self._Z is None:
            self._Z = row_sums(self._S, self._pairs, self._starts, self._sizes)
        return self._Z

    def _weights(self) -> np.ndarray:
        """Expected visits of each clone per episode (from the kept statistics)."""
        return self._kept_sums()[0] if self._S is not None else np.ones(self._H)

    def _kept_sums(self):
        """``(S.sum(axis=(0, 2)), S.sum())`` with the scale, from the kept row sums."""
        w = self._g * self._row_sums().sum(axis=0)
        return w, float(w.sum())

    def _lump(self) -> None:
        """Blocks of clones that neither the Hoeffding test nor the Bayes-factor test tells apart
        (:func:`~hmmmerge._replay_kernels.lump_clones`).

        The kept statistics are a weighted mean of per-episode counts; as counts they stand for their
        effective number of episodes, ``1 / sum_u w_u**2 / n_u`` over the batches (weights ``w_u``, ``n_u``
        episodes each), the sample size with the same variance.  Hoeffding's risk is ``risk``; two clones
        whose log Bayes factor (two next-block distributions against one, Dirichlet-multinomial marginals
        of concentration :meth:`_concentration`) exceeds ``log(1 / risk)`` are told apart too: a clone of a
        rarely visited place seen 3 times going elsewhere than a busy clone of its view is a place of its
        own in a near-deterministic world, which the distribution-free bound cannot see (BENCHMARKS.md,
        "A sharper lumping test")."""
        from ._replay_kernels import lump_clones_pairs

        bound = float(np.sqrt(0.5 * np.log(2.0 / float(self.risk))))
        alpha = self._concentration()
        threshold = float(np.log(1.0 / float(self.risk)))
        self._block = lump_clones_pairs(self._S, self._g / self._var, self._pairs, self._starts, self._sizes,
                                        self._colour, bound, float(self.tolerance), 50, alpha, threshold)
        self._lumped = None

    def _concentration(self) -> float:
        """The Bayes-factor test's Dirichlet concentration per next block: ``max(dirichlet, noise rate + slip
        share)``, at most 1 (0: the test is off).  The learner's own estimates of how far the world is from
        deterministic: small on a clean world (the test is sharp), larger with noisy views or slips."""
        if not self.dirichlet:
            return 0.0
        return float(min(max(float(self.dirichlet), self._noise + self._slip), 1.0))

    def _fold_unheld(self) -> None:
        """Blocks that hold no level-1 state (no state has its most probable clone there) join the block of
        their observation that holds states and whose next-block distributions are nearest (L1, summed
        over actions), so that level 2 -- the blocks that hold states -- keeps their transitions."""
        held = self._held_blocks()
        if held.all() or not held.any():
            return
        self._blocks_model()
        colour = self._block_colour()
        target = np.arange(len(held))
        unheld = np.flatnonzero(~held)
        keep = np.flatnonzero(held & np.isin(colour, colour[unheld]))
        keep = keep[np.argsort(colour[keep], kind="stable")]   # held blocks by view, increasing within
        cuts = np.searchsorted(colour[keep], np.arange(int(colour.max()) + 2))
        first = cuts[colour[unheld]]
        last = cuts[colour[unheld] + 1]
        asked = first < last   # an unheld block with a held block of its view
        rows = np.concatenate([keep, unheld[asked]])
        dense = self._dense_rows(rows)   # the rows asked for, once
        at = np.full(len(held), -1, dtype=np.int64)
        at[rows] = np.arange(len(rows))
        for u, lo, hi in zip(unheld[asked].tolist(), first[asked].tolist(), last[asked].tolist()):
            cands = keep[lo:hi]
            near, own = dense[:, at[cands], :], dense[:, at[u], None, :]
            dist = np.abs(near - own).sum(axis=(0, 2))   # as on the dense model (the same sums)
            target[u] = cands[int(np.argmin(dist))]
        ids, fold = np.unique(target, return_inverse=True)
        self._block = fold[self._block].astype(np.int64)
        self._lumped = _folded_model(self._lumped, self._block_weights, fold, len(ids))

    def _blocks_model(self):
        """``(ptr, col, val, B)`` of all blocks: the clone HMM lumped by block (weights: expected visits),
        ``T`` as stacked CSR (row ``a * nb + x``, :func:`~hmmmerge._replay_kernels.lumped_model`)."""
        from ._replay_kernels import lumped_model

        if self._lumped is None:
            nb = int(self._block.max()) + 1
            w = self._weights()
            # each block's weight and clones (a fold of blocks then lumps the lumped model: _folded_model)
            self._block_weights = (np.bincount(self._block, weights=w, minlength=nb),
                                   np.bincount(self._block, minlength=nb).astype(float))
            self._lumped = lumped_model(self._T, self._B, w, self._block, nb, *self._successors(), self._starts,
                                        self._sizes, self._colour)
        return self._lumped

    def _dense_rows(self, blocks) -> np.ndarray:
        """The lumped model's rows of ``blocks``, dense: ``(A, len(blocks), nb)``."""
        ptr, col, val, BL = self._blocks_model()
        nb = len(BL)
        rows = (np.arange(self._A)[:, None] * nb + np.asarray(blocks, dtype=np.int64)[None, :]).ravel()
        out = np.zeros((len(rows), nb))
        lens = ptr[rows + 1] - ptr[rows]
        take = np.repeat(ptr[rows] - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        out[np.repeat(np.arange(len(rows)), lens), col[take]] = val[take]
        return out.reshape(self._A, -1, nb)

    # ------------------------------------------------------------ level 2 for the agent
    def _restricted(self):
        """``T`` and ``B`` of the lumped model on the clusters' blocks, rows renormalised (dense)."""
        from ._replay_kernels import dense_lumped

        ids = self._block_of
        ptr, col, val, BL = self._blocks_model()
        T = dense_lumped(ptr, col, val, self._A, len(BL))[:, ids][:, :, ids]
        s = T.sum(axis=2, keepdims=True)
        T = np.divide(T, s, out=np.full_like(T, 1.0 / max(len(ids), 1)), where=s > 0)  # no move seen: uniform
        B = BL[ids]
        B = B / B.sum() if B.sum() > 0 else np.full(len(ids), 1.0 / max(len(ids), 1))
        return T, B

    def level2_transitions(self, memory, clusters):
        """The agent's level-2 transitions (stacked CSR, row ``a * k + c``; link counts 1, first source -1):
        ``T`` on the clusters, entries below ``prune`` dropped, rows renormalised; None before the first sleep.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> ptr, idx, val, _, _ = agent.merger_.level2_transitions(agent.memory_, agent.clusters_)
        >>> len(ptr) == 4 * agent.n_clusters_ + 1, bool(np.allclose(np.add.reduceat(val, ptr[:-1]), 1))
        (True, True)

        In the exact phase: the fold's (:meth:`hmmmerge.fold.FoldMerger.level2_transitions`).
        """
        if self._fold is not None:
            return self._fold.level2_transitions(memory, clusters)
        if self._A is None or self._T is None or len(self._block_of) != clusters.n_clusters:
            return None
        if self._t2 is None:
            from ._replay_kernels import restricted_transitions

            ptr, col, val, BL = self._blocks_model()
            indptr, idx, vals = restricted_transitions(ptr, col, val, len(BL), np.asarray(self._block_of, np.int64),
                                                       float(self.prune))
            m = len(idx)
            self._t2 = (indptr, idx, vals, np.ones(m, dtype=np.int64), np.full(m, -1, dtype=np.int64))
        return self._t2

    def emission(self, clusters, n_states: int) -> np.ndarray:
        """Each cluster's emission, (k, n_obs): its clone's observation with probability ``1 - q``, every
        observation with ``q / n_obs``, where ``q`` is the estimated rate of random views (see
        :meth:`_views_read_as_noise`), so that a noisy view does not throw the filter off the map.
        Read-only: the same array while the clusters' views and the rate stay.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> E = agent.merger_.emission(agent.clusters_, agent.memory_.n_states); E.shape == (agent.n_clusters_, 10)
        True

        None in the exact phase: a cluster of the fold emits its view (the agent then reads one view per cluster).
        """
        if self._A is None:
            raise ValueError("no level-1 state recorded yet: level 2 is not known")
        if self._fold is not None:
            return None
        k = clusters.n_clusters
        if len(self._block_of) != k:
            raise ValueError("the clusters are not the ones this merger wrote")
        colours = self._block_colour()[self._block_of]
        key = (float(self._noise), self._K, colours.tobytes())
        cached = getattr(self, "_emission_cache", None)
        if cached is None or cached[0] != key:   # the agent asks after every chunk of steps: kept while it holds
            E = np.full((k, self._K), self._noise / self._K)
            E[np.arange(k), colours] += 1.0 - self._noise
            E.flags.writeable = False
            self._emission_cache = cached = (key, E)
        return cached[1]

    def emission_floor(self, clusters) -> np.ndarray:
        """The value of every entry of :meth:`emission` off the cluster's own observation (the agent's
        online predictors then rank observations in O(clusters reached), see
        :func:`hmmmerge._agent_kernels._predict_floor`).

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> m = agent.merger_; E = m.emission(agent.clusters_, agent.memory_.n_states)
        >>> bool(np.all(np.sort(E, axis=1)[:, :-1] == m.emission_floor(agent.clusters_)[:, None]))
        True
        """
        return np.full(clusters.n_clusters, self._noise / self._K)

    def online_belief_cut(self) -> float:
        """The share of an online level-2 belief below which a cluster leaves it: :data:`ONLINE_BELIEF_CUT` on a
        model of more than :data:`ONLINE_BELIEF_CUT_CLONES` clones or of at most :data:`ONLINE_BELIEF_CUT_VIEWS`
        views, else 0 (read by :class:`hmmmerge.level2.Level2`
        with :meth:`emission`; the cut mass comes back through the belief's ``lost`` share)."""
        return ONLINE_BELIEF_CUT if self._H > ONLINE_BELIEF_CUT_CLONES or self._K <= ONLINE_BELIEF_CUT_VIEWS else 0.0

    def _block_colour(self) -> np.ndarray:
        out = np.zeros(int(self._block.max()) + 1, dtype=np.int64)
        out[self._block] = self._colour
        return out

    def level2_hmm(self, memory, clusters):
        """Level 2 as an :class:`~hmmmerge.hmm.ActionHMM`: the clone HMM on the clusters' clones.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> agent.merger_.level2_hmm(agent.memory_, agent.clusters_).n_states == agent.n_clusters_
        True
        """
        from .hmm import ActionHMM

        if self._fold is not None:   # the exact phase: the fold's level 2, as the agent counts it from level 1
            from .clusters import level2_hmm

            return level2_hmm(memory, clusters)
        if self._A is None or self._T is None or not len(self._block_of):
            raise ValueError("no sleep yet: there is no level-2 model")
        T, B = self._restricted()
        return ActionHMM(T, self.emission(clusters, memory.n_states), B)

    # ------------------------------------------------------------ files
    def state_dict(self) -> dict:
        """Arrays that fully describe the merger (``replay_*`` keys, for ``.npz`` files); empty before any data.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> sorted(agent.merger_.state_dict())[:3]
        ['replay_B', 'replay_S', 'replay_Sb']
        """
        if self._A is None:
            return {}
        eps = self._episodes
        lens = np.array([len(e[0]) for e in eps], dtype=np.int64)
        cat = (lambda j: np.concatenate([e[j] for e in eps]).astype(np.int64)) if eps else \
            (lambda j: np.zeros(0, dtype=np.int64))
        has = self._T is not None
        H, A = self._H, self._A
        out = {
            "sizes": np.array([self._K, A, H, self._updates, self._n_new, self._last, int(has),
                              self._n_seen], dtype=np.int64),
            "clone_sizes": self._sizes.copy(),   # clones per view (alloc="visits": decided at the first sleep)
            "T": self._T if has else np.zeros((A, H, H)), "B": self._B if has else np.zeros(H),
            "S": self._S if self._S is not None else np.zeros((A, H, H)),
            "Sb": self._Sb if self._Sb is not None else np.zeros(H),
            # S holds the kept counts over count_scale; row_sums: S.sum(axis=2) as kept (exact continuation)
            "count_scale": np.array([self._g]),
            "row_sums": self._row_sums() if self._S is not None else np.zeros((A, H)),
            "variance": np.array([self._var]), "noise": np.array([self._noise]),
            "episode_lengths": lens, "obs": cat(0), "actions": cat(1), "states": cat(2),
            "current": np.array(self._cur, dtype=np.int64).reshape(3, -1),
            "clone_of_state": self._clone_state[:self._n_seen].copy() if len(self._clone_state) >= self._n_seen
            else np.concatenate([self._clone_state, np.full(self._n_seen - len(self._clone_state), -1)]),
            "block_of_clone": self._block.copy(), "block_of_cluster": self._block_of.copy(),
            "pairs": self._pairs.copy(), "slip": np.array([self._slip, self._Sslip]),
            "split_codes": self._evidence[0].copy() if self._evidence is not None else np.zeros(0, dtype=np.int64),
            "split_counts": self._evidence[1].copy() if self._evidence is not None else np.zeros(0),
            "since_deep": np.array([self._since_deep], dtype=np.int64),   # episodes learned since a deep sleep
            # the buffered episodes' views as the last few-view deep sleep read them (the views where it read none)
            "read_obs": np.concatenate([e[0] if r is None else r for e, r in zip(eps, self._read)]).astype(np.int64)
            if eps else np.zeros(0, dtype=np.int64),
            # episodes dropped from the buffer that the few-view deep sleeps still learn from (FEW_VIEW_DEEP_EPISODES)
            "old_episode_lengths": np.array([len(e[0]) for e in self._old], dtype=np.int64),
            "old_obs": np.concatenate([e[0] for e in self._old]).astype(np.int64) if self._old else
            np.zeros(0, dtype=np.int64),
            "old_actions": np.concatenate([e[1] for e in self._old]).astype(np.int64) if self._old else
            np.zeros(0, dtype=np.int64),
            "noise_idle": np.array([self._noise_idle], dtype=np.int64),   # sleeps since the noise look-ahead ran
            # the slip floor's kept moves per row (recorded to another view than the row's most common; all)
            "slip_floor": np.stack([self._Soff, self._Stot]) if self._Soff is not None else np.zeros((2, A, H)),
            # the exact phase: in force, episodes lived when it ended (-1: not yet), why (-1: no phase), the first
            # start state, steps and episodes lived, the fold's work so far, episodes since its last sleep; its
            # fold under replay_exact_fold_*
            "exact": np.array([int(self._fold is not None), -1 if self._exact_end is None else self._exact_end[0],
                               -1 if self._exact_end is None else self._exact_end[1], self._start0, self._steps,
                               self._lived, self._work, self._since_fold], dtype=np.int64),
        }
        if self._fold is not None:
            out.update({"exact_" + k: v for k, v in self._fold.state_dict().items()})
        return {_PREFIX + k: v for k, v in out.items()}

    def load_state_dict(self, d, source: str = "<dict>") -> None:
        """Restore :meth:`state_dict` arrays (no ``replay_*`` keys: a fresh merger); every array is checked
        (dtype, shape, range) and a bad one named in a one-line ``ValueError``.

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.agent import TwoLevelMemory
        >>> agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 20, seed=0))
        >>> back = ReplayMerger(); back.load_state_dict(agent.merger_.state_dict())
        >>> bool(np.array_equal(back._T, agent.merger_._T))
        True
        >>> bad = dict(agent.merger_.state_dict(), replay_T=-agent.merger_._T)
        >>> back.load_state_dict(bad, source="agent.npz")
        Traceback (most recent call last):
        ...
        ValueError: agent.npz: replay_T holds values outside [0.0, 1.0]
        """
        if _PREFIX + "sizes" not in d:
            self._A = None
            return
        get = _Reader(d, source)
        K, A, H, updates, n_new, last, has, n_seen = get.ints("sizes", shape=(8,), low=-1).tolist()
        if K < 1 or A < 1 or H < 1 or updates < 0 or n_new < 0 or has not in (0, 1) or n_seen < 0:
            raise ValueError(f"{source}: replay_sizes holds out-of-range values")
        even = self._clones_per_observation(K)
        if _PREFIX + "clone_sizes" in d:   # files before alloc="visits": every view the same number
            layout = get.ints("clone_sizes", shape=(K,), low=1, high=H)
            if int(layout.sum()) != H:
                raise ValueError(f"{source}: replay_clone_sizes sum to {int(layout.sum())}, replay_sizes says {H}")
        else:
            layout = np.full(K, H // K, dtype=np.int64)
            if H % K:
                raise ValueError(f"{source}: replay_sizes says {H} clones for {K} observations (not a multiple)")
        # a layout shared by visits (alloc="visits"), or views grown past it from random starts (GROW_VIEW_CAP)
        if (layout != even).any() and not (self.alloc == "visits" and self.n_clones is None
                                           and layout.max() <= max(CLONE_CAP, even) and H <= K * even) \
                and not (self._growable(K) and layout.max() <= GROW_VIEW_CAP):
            raise ValueError(f"{source}: replay_sizes says {H} clones for {K} observations; this merger has "
                             f"{even} clones per observation (n_clones={self.n_clones}, alloc={self.alloc!r})")
        self._init(K, A)
        if (layout != self._sizes).any():
            self._layout(layout)
        n_states = len(d["assignment"]) if "assignment" in d else None
        T = get.floats("T", shape=(A, H, H), low=0.0, high=1.0)
        B = get.floats("B", shape=(H,), low=0.0, high=1.0)
        S = get.floats("S", shape=(A, H, H), low=0.0)
        Sb = get.floats("Sb", shape=(H,), low=0.0)
        # files before the scaled counts: scale 1, row sums summed here
        g = float(get.floats("count_scale", shape=(1,), low=0.0, high=1.0)[0]) if _PREFIX + "count_scale" in d else 1.0
        Z = get.floats("row_sums", shape=(A, H), low=0.0) if _PREFIX + "row_sums" in d else None
        if updates and g <= 0.0:
            raise ValueError(f"{source}: replay_count_scale must be positive after an update")
        var = float(get.floats("variance", shape=(1,), low=0.0, high=1.0)[0])
        noise = float(get.floats("noise", shape=(1,), low=0.0, high=1.0)[0])
        if updates and var <= 0.0:
            raise ValueError(f"{source}: replay_variance must be positive after an update")
        # files before the observation pairs: every pair, no slip (their T is the same model)
        pairs = get.ints("pairs", ndim=2, low=0, high=K - 1) if _PREFIX + "pairs" in d else \
            np.argwhere(np.ones((K, K), dtype=bool)).astype(np.int64)
        slip, slipped = get.floats("slip", shape=(2,), low=0.0).tolist() if _PREFIX + "slip" in d else (0.0, 0.0)
        if pairs.shape[1] != 2 or len(np.unique(pairs[:, 0] * K + pairs[:, 1])) != len(pairs) or slip > 0.99:
            raise ValueError(f"{source}: replay_pairs must be distinct (observation, observation) rows and "
                             f"replay_slip[0] at most 0.99")
        has_pair = np.zeros((K, K), dtype=bool)
        has_pair[pairs[:, 0], pairs[:, 1]] = True
        if has:
            # rows sum to 1 on the pairs' blocks (0 for an observation never followed by another), nothing
            # outside them
            colour = self._colour
            inside = has_pair[colour][:, colour]
            rows = np.where(inside[None], T, 0.0).sum(axis=2)
            want = has_pair.any(axis=1)[colour][None, :].astype(float)
            if not np.allclose(rows, want, atol=1e-6) or not np.allclose(T.sum(axis=2), want, atol=1e-6) \
                    or not np.isclose(B.sum(), 1.0, atol=1e-6):
                raise ValueError(f"{source}: replay_T or replay_B rows do not sum to 1 on replay_pairs")
        lens = get.ints("episode_lengths", ndim=1, low=1)
        total = int(lens.sum())
        obs = get.ints("obs", shape=(total,), low=0, high=K - 1)
        acts = get.ints("actions", shape=(total,), low=-1, high=A - 1)
        sts = get.ints("states", shape=(total,), low=0, high=None if n_states is None else n_states - 1)
        cur = get.ints("current", ndim=2, low=-1)
        clone_state = get.ints("clone_of_state", shape=(n_seen,), low=-1, high=H - 1)
        block = get.ints("block_of_clone", shape=(H,), low=0, high=H - 1)
        block_of = get.ints("block_of_cluster", ndim=1, low=0, high=int(block.max()))
        colour = self._colour
        first = np.full(H, -1, dtype=np.int64)
        first[block[::-1]] = colour[::-1]
        if (first[block] != colour).any() or not np.array_equal(np.unique(block), np.arange(block.max() + 1)):
            raise ValueError(f"{source}: replay_block_of_clone mixes observations or skips block ids")
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        if total and ((acts[starts] != -1).any() or (np.delete(acts, starts) < 0).any()):
            raise ValueError(f"{source}: replay_actions must be -1 exactly at the episodes' starts")
        if cur.shape[0] != 3 or (cur.shape[1] and (cur[0].max() >= K or cur[0].min() < 0 or cur[1, 0] != -1
                                                    or (cur[1, 1:] < 0).any() or cur[1].max() >= A
                                                    or cur[2].min() < 0)):
            raise ValueError(f"{source}: replay_current is malformed")
        if n_new > len(lens) or len(np.unique(block_of)) != len(block_of) or (
                n_states is not None and (last >= n_states or n_seen > n_states
                                          or (cur.shape[1] and cur[2].max() >= n_states))):
            raise ValueError(f"{source}: replay_sizes, replay_current or replay_block_of_cluster are inconsistent")
        exact = self._read_exact(d, get, source, n_seen, has)
        if n_states is not None and "assignment" in d and exact is None:   # in the exact phase C is the fold's
            a = np.asarray(d["assignment"])
            if len(np.unique(a[a >= 0])) != len(block_of):
                raise ValueError(f"{source}: the clusters of assignment do not match replay_block_of_cluster")
        if _PREFIX + "split_codes" in d:   # files before the splits: no evidence yet
            codes = get.ints("split_codes", ndim=1, low=0, high=H * (A * H + 1) * (A * K) - 1)
            counts = get.floats("split_counts", shape=codes.shape, low=0.0)
            if len(codes) and (np.diff(codes) <= 0).any():
                raise ValueError(f"{source}: replay_split_codes must be strictly increasing")
            self._evidence = (codes, counts) if len(codes) else None
        # files before deep sleeps: none made yet
        self._since_deep = int(get.ints("since_deep", shape=(1,), low=0)[0]) if _PREFIX + "since_deep" in d else 0
        # files before the few-view deep sleeps over FEW_VIEW_DEEP_EPISODES: no older episodes kept
        self._old = self._read_old(get, d, source, K, A)
        # files before the thinned noise look-ahead: it ran at their last sleep
        self._noise_idle = int(get.ints("noise_idle", shape=(1,), low=0, high=NOISE_SKIP_EVERY - 1)[0]) \
            if _PREFIX + "noise_idle" in d else 0
        self._pairs, self._has_pair, self._slip, self._Sslip = pairs, has_pair, slip, slipped
        # files before the slip floor: none kept yet (it is counted from the next sleep on)
        fl = get.floats("slip_floor", shape=(2, A, H), low=0.0) if _PREFIX + "slip_floor" in d else None
        if fl is not None and (fl[0] > fl[1]).any():
            raise ValueError(f"{source}: replay_slip_floor has a row with more moves to other views than moves")
        self._Soff, self._Stot = (fl[0].copy(), fl[1].copy()) if fl is not None and fl[1].any() else (None, None)
        self._T, self._B = (T, B) if has else (None, None)
        self._S, self._Sb = (S, Sb) if updates else (None, None)
        self._g, self._Z = g, None
        if updates:
            from ._replay_kernels import row_sums

            summed = row_sums(S, pairs, self._starts, self._sizes)
            if Z is not None and not np.allclose(Z, summed, rtol=1e-6, atol=1e-12 * max(float(summed.max()), 1e-300)):
                raise ValueError(f"{source}: replay_row_sums are not the row sums of replay_S on replay_pairs")
            self._Z = summed if Z is None else Z
        if has:
            from ._replay_kernels import m_step_pairs

            self._C = np.zeros_like(T)
            self._Q = np.zeros_like(T)
            if updates:   # Q is the M-step of the kept counts (T mixes it with the slip)
                m_step_pairs(S, self._Q, np.zeros_like(T), pairs, self._starts, self._sizes,
                             float(self.window) * g, float(self.pseudocount), slip, np.ones(K, dtype=np.bool_),
                             self._Z)
            else:
                self._Q[:] = T
        self._var = var
        self._noise = noise
        self._updates, self._n_new, self._last, self._n_seen = updates, n_new, last, n_seen
        self._episodes = [(obs[s:s + n], acts[s:s + n], sts[s:s + n]) for s, n in zip(starts.tolist(), lens.tolist())]
        # files before the few-view deep sleeps over older episodes: the views as they were seen
        read = get.ints("read_obs", shape=(total,), low=0, high=K - 1) if _PREFIX + "read_obs" in d else obs
        self._read = [None if np.array_equal(read[s:s + n], obs[s:s + n]) else read[s:s + n]
                      for s, n in zip(starts.tolist(), lens.tolist())]
        self._cur = tuple(row.tolist() for row in cur)
        self._clone_state = clone_state.copy()
        self._clone_n = None   # counted at the next use, with level 1's labels
        self._block = block
        self._block_of = block_of
        self._cluster_of[block_of] = np.arange(len(block_of))
        self._fold, self._exact_end = (exact[0], None) if exact is not None else (None, self._exact_end)
        self._used = np.zeros((A, 0), dtype=bool)
        if self._fold is not None:   # the (action, state) pairs that created a state: the fold's recorded tree
            st, n = self._fold._st, self._fold._n
            rec = np.flatnonzero(st.parent[1:n] > 0) + 1
            self._used = np.zeros((A, max(n_seen, 1)), dtype=bool)
            self._used[st.action[rec], st.parent[rec] - 1] = True

    def _read_old(self, get, d, source: str, K: int, A: int) -> list:
        """The episodes dropped from the buffer that a :meth:`load_state_dict` file keeps for the few-view
        deep sleeps (:data:`FEW_VIEW_DEEP_EPISODES`); [] for files before them."""
        if _PREFIX + "old_episode_lengths" not in d:
            return []
        lens = get.ints("old_episode_lengths", ndim=1, low=1)
        total = int(lens.sum())
        obs = get.ints("old_obs", shape=(total,), low=0, high=K - 1)
        acts = get.ints("old_actions", shape=(total,), low=-1, high=A - 1)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        if total and ((acts[starts] != -1).any() or (np.delete(acts, starts) < 0).any()):
            raise ValueError(f"{source}: replay_old_actions must be -1 exactly at the episodes' starts")
        if len(lens) and not self._long_deep:
            raise ValueError(f"{source}: replay_old_episode_lengths holds episodes, but this merger keeps none "
                             f"(deep sleeps over older episodes need at most {FEW_VIEWS} views and deep sleeps)")
        if len(lens) > max(FEW_VIEW_DEEP_EPISODES - int(self.window), 0):
            raise ValueError(f"{source}: replay_old_episode_lengths holds {len(lens)} episodes, more than "
                             f"{max(FEW_VIEW_DEEP_EPISODES - int(self.window), 0)}")
        return [(obs[a:a + n], acts[a:a + n]) for a, n in zip(starts.tolist(), lens.tolist())]

    def _read_exact(self, d, get, source: str, n_seen: int, has: int):
        """The exact phase of a :meth:`load_state_dict` file: sets the counters and ``_exact_end``; returns
        ``(fold,)`` when the phase is in force, else None (files before it: no exact phase)."""
        if _PREFIX + "exact" not in d:
            self._start0, self._steps, self._lived, self._work, self._since_fold = -1, 0, 0, 0, 0
            self._exact_end = (0, -1)
            return None
        on, ended, reason, start0, steps, lived, work, since = get.ints("exact", shape=(8,), low=-1).tolist()
        if on not in (0, 1) or min(steps, lived, work, since) < 0 or start0 >= max(n_seen, 1) or reason >= len(EXACT_REASONS) \
                or (on and (ended != -1 or reason != -1 or has)) or (not on and (ended < 0 or ended > lived)):
            raise ValueError(f"{source}: replay_exact holds out-of-range or inconsistent values")
        if on and not self.exact:
            raise ValueError(f"{source}: replay_exact says the exact phase is in force, but this merger has exact=False")
        self._start0, self._steps, self._lived, self._work, self._since_fold = start0, steps, lived, work, since
        self._exact_end = None if on else (ended, reason)
        if not on:
            return None
        from .fold import FoldMerger

        prefix = _PREFIX + "exact_"
        sub = {k[len(prefix):]: v for k, v in d.items() if k.startswith(prefix)}
        sub.update({k: v for k, v in d.items() if k.startswith("l1_")})   # the fold checks its tree against level 1
        if "fold_sizes" not in sub:
            raise ValueError(f"{source}: replay_exact says the exact phase is in force, but {prefix}fold_sizes is missing")
        fold = FoldMerger()
        fold.load_state_dict(sub, source=source)
        if fold.n_recorded != n_seen:
            raise ValueError(f"{source}: the exact phase's fold recorded {fold.n_recorded} level-1 states, "
                             f"replay_sizes says {n_seen}")
        return (fold,)


class _Reader:
    """Checked reads of ``replay_*`` arrays: dtype, shape and range, each failure one line naming the array."""

    def __init__(self, d, source):
        self.d, self.source = d, source

    def _get(self, name):
        key = _PREFIX + name
        if key not in self.d:
            raise ValueError(f"{self.source}: {key} is missing")
        return key, np.asarray(self.d[key])

    def _shape(self, key, x, shape, ndim):
        if (shape is not None and x.shape != shape) or (ndim is not None and x.ndim != ndim):
            want = shape if shape is not None else f"{ndim}-D"
            raise ValueError(f"{self.source}: {key} has shape {x.shape}, expected {want}")

    def ints(self, name, shape=None, ndim=None, low=None, high=None) -> np.ndarray:
        key, x = self._get(name)
        if not (np.issubdtype(x.dtype, np.integer) or (x.size == 0 and x.dtype == np.float64)):
            raise ValueError(f"{self.source}: {key} must hold integers, got dtype {x.dtype}")
        self._shape(key, x, shape, ndim)
        x = x.astype(np.int64)
        if x.size and ((low is not None and x.min() < low) or (high is not None and x.max() > high)):
            raise ValueError(f"{self.source}: {key} holds values outside [{low}, {high}]")
        return x

    def floats(self, name, shape=None, low=None, high=None) -> np.ndarray:
        key, x = self._get(name)
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"{self.source}: {key} must hold floats, got dtype {x.dtype}")
        self._shape(key, x, shape, None)
        x = np.ascontiguousarray(x, dtype=np.float64)
        if not np.isfinite(x).all():
            raise ValueError(f"{self.source}: {key} holds NaN or infinite values")
        if x.size and ((low is not None and x.min() < low) or (high is not None and x.max() > high)):
            lo, hi = "-inf" if low is None else low, "inf" if high is None else high
            raise ValueError(f"{self.source}: {key} holds values outside [{lo}, {hi}]")
        return x


def _folded_model(lumped, block_weights, fold, n):
    """:func:`~hmmmerge._replay_kernels.lumped_model` after blocks ``b`` are joined into ``fold[b]`` (``n``
    of them), from the model ``lumped`` of the blocks before (weights ``block_weights``: each block's
    weight and number of clones), without a pass over ``T``: the joined block's row is its blocks' rows
    weighted by their weights (by their clones where the joined block weighs nothing, as the plain mean
    of its clones), columns summed (:func:`~hmmmerge._replay_kernels.folded_model`, on the stacked CSR)."""
    from ._replay_kernels import folded_model

    ptr, col, val, BL = lumped
    nb = len(BL)
    W, cnt = block_weights
    fold = np.asarray(fold, dtype=np.int64)
    Wf = np.bincount(fold, weights=W, minlength=n)
    c = np.where(Wf[fold] > 0, W, cnt)
    share = c / np.bincount(fold, weights=c, minlength=n)[fold]
    order = np.argsort(fold, kind="stable")
    cuts = np.searchsorted(fold[order], np.arange(n))
    A = (len(ptr) - 1) // max(nb, 1)
    return (*folded_model(ptr, col, val, A, nb, share, fold, n), np.add.reduceat(BL[order], cuts))


def _block_argmax(alpha, off) -> np.ndarray:
    """Index of the largest entry within every step's block of the flat per-step array."""
    from ._replay_kernels import block_argmax

    return block_argmax(alpha, off)
