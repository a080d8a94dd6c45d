import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
