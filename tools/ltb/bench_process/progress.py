"""The progress a run of many bench processes prints (sweep, abtest): the
time elapsed and what is left, from the mean time of the runs done."""
import time

from ltb.base import clock


class Progress:
    def __init__(self, runs):
        self.left, self.start, self.durations = runs, time.monotonic(), []

    def step(self, seconds):
        """One run done, in `seconds`: 'elapsed H:MM:SS, about H:MM:SS left'."""
        self.durations.append(seconds)
        self.left -= 1
        eta = sum(self.durations) / len(self.durations) * self.left
        return f"elapsed {clock(time.monotonic() - self.start)}, about {clock(eta)} left"
