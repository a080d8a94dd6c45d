import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# Every GE graph built anywhere in the suite (rank workers inherit this) is checked against
# the GE operator registry before it runs.
os.environ.setdefault("TORCHAIR_DIST_GE_VALIDATE", "1")
