"""Per-rank graph backends: ``aclgraph`` (``npugraph_ex`` / ``reduce-overhead``) and ``ge``
(``max-autotune``).

Each package exposes ``BACKEND``, a :class:`~torchair_dist.backends.interface.Backend`
(``start(ctx) -> build``, ``load(handle, ctx) -> build``, ``finish(build) -> Compiled(runner,
handle)``) that the mode table names, and the step functions its mode rows list at the
``backend`` level (``build -> build``). The pipeline's route calls them in that order, once;
a backend never calls a step or the pipeline itself.
A backend never imports another backend; the route's ``compile`` stage picks one per mode.
"""
