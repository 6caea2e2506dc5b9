"""The CPU's last-level cache as bench's CPU backend reads it
(lib/device/cpu_backend.cc), without torch: what a step must work past for
its reads to be memory's (mbu)."""
import os


def last_level_cache(root="/sys/devices/system/cpu/cpu0/cache"):
    """cpu0's largest cache in bytes (sysfs, else sysconf; 0 when neither
    says): on a CPU of several core complexes, one complex's."""
    best = 0
    for i in range(8):
        try:
            with open(f"{root}/index{i}/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text[:-1] if scale > 1 else text
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    if best == 0:
        try:
            best = max(0, os.sysconf("SC_LEVEL3_CACHE_SIZE"))
        except (ValueError, OSError):
            pass
    return best
