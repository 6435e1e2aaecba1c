"""fgbuff: Python front ends of the fgbuffd gradient-synchronisation daemon.

fgbuff.client is torch-free (ctypes over libfgbuff_client); fgbuff.torch is Horovod's PyTorch API.
"""

__version__ = "0.1.0"
