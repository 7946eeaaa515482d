"""Start the kernelspec named on the command line through jupyter_client,
print "READY <kernel pid>" once it answers, keep it running until a line
arrives on stdin (or stdin closes), then shut it down and print "DONE".
Used by TestInstallUninstallSaysWhichKernelsRun."""

import sys

from jupyter_client import KernelManager

km = KernelManager(kernel_name=sys.argv[1])
km.start_kernel()
try:
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    print("READY %d" % km.provisioner.pid, flush=True)
    sys.stdin.readline()
    kc.stop_channels()
finally:
    km.shutdown_kernel(now=False)
print("DONE", flush=True)
