# Put on a kernel's PYTHONPATH by states.py: Python runs this at start-up,
# before `-m ipykernel_launcher` (or a spare's imports) import anything of
# Jupyter's, and it waits until the file E2E_GATE exists. So the test sees
# the kernel in its "starting" state for as long as it likes; once the
# file is there, nothing waits (a spare started later does not).
import os
import time

_gate = os.environ.get("E2E_GATE")
while _gate and not os.path.exists(_gate):
    time.sleep(0.02)
