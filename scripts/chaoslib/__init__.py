"""The chaos run's parts (`scripts/chaos.py` is the entry point): the network (`net`), the
deployment and its sampling (`deploy`), the load and the faults (`phases`), the bounds derived
from the run's flags (`bounds`), and the checker (`check`)."""
