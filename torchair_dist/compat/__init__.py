"""TorchAir compatibility: TorchAir's top-level names that are not the compiler, and the surface
table that maps every public TorchAir name to ours."""
