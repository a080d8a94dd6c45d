"""The compile pipeline: the declared stages (:mod:`.stages`), the backend entry (:mod:`.entry`),
the route a graph takes (:mod:`.route`), AOT wiring (:mod:`.aot`), the graph context, the
decomposition table, torch patches and dynamo_export (the graph passes, user patterns included,
live in :mod:`torchair_dist.passes`)."""
