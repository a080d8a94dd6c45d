"""Per-rank graph backends. Each backend package exposes ``compile_graph(ctx) -> runner``.

A backend never imports another backend; ``torchair_dist.pipeline.route`` picks one per mode.
"""
