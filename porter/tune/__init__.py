"""`porter tune`: try the catalogue's recipes on the target, measure what each recovers, keep
what holds accuracy (docs/tune.md). ``candidates`` picks what to try, ``measure`` times one
tuned side against the untuned target and the source, ``cache`` keeps what was measured,
``run`` orders the work and the greedy combination, ``outputs`` writes tune.json, the snippet
and the bench case."""
