"""Autoscaling: policies that decide how many nodes the ring runs (pure functions of
measured figures, :mod:`smr.autoscale.policies`) and what they decide on
(:mod:`smr.autoscale.observe`)."""
