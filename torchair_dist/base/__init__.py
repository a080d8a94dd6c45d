"""Ground-floor helpers: logging, environment variables, small utilities, the torch versions and
private APIs this library leans on. Imports nothing above it."""
