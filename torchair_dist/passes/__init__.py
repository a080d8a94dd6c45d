"""Graph passes shared by both backends. A pass is ``(gm, example_inputs, config) -> gm``."""
