"""Baselines every learner is measured against; each produces an :class:`~hmmmerge.hmm.ActionHMM`."""
