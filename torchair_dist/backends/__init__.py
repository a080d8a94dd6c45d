"""Per-rank graph backends: ``aclgraph`` (``npugraph_ex`` / ``reduce-overhead``) and ``ge``
(``max-autotune``).

Each package exposes ``BACKEND``, a :class:`~torchair_dist.base.graph_context.Backend`
(``compile(ctx) -> runner``, ``load(entry, ctx) -> runner``) that the mode table names, and the
step functions its mode rows list at the ``backend`` level (``build -> build``): ``compile``
starts a build and the pipeline's runner runs the row's steps on it (``ctx.run_steps``).
A backend never imports another backend; the route's ``compile`` stage picks one per mode.
"""
