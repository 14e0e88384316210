"""NVTX ranges and marks from any library, through polyprof's own NVTX injection library
(``_nvtxinject.c``): recorder.py starts, stops and reads it (and says who injects),
convert.py makes the Trace. The host plugin runs it in every session."""
