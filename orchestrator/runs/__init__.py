"""Playing a run: the tick loop over a host, counterfactual attribution, forks."""
