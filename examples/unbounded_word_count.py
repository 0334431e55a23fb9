"""An unbounded word count: a source that never ends, counted per word until cancelled.

    raylink run examples/unbounded_word_count.py [--rate LINES_PER_SECOND]
    raylink submit --no-wait --address http://HEAD:8265 examples/unbounded_word_count.py
    raylink cancel --address http://HEAD:8265 <job id>

Each source subtask emits ``--rate`` lines per second (default 200); the job
prints a word's count every time it reaches a multiple of ``--every`` (default 500),
so its log grows slowly while the progress display shows records flowing.
"""

import argparse
import time

from raylink.api import StreamExecutionEnvironment
from raylink.api.functions import SourceFunction

WORDS = ["to", "be", "or", "not", "that", "is", "the", "question"]


class EndlessLines(SourceFunction):
    """Lines of words, ``rate`` per second, until ``cancel``."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.running = True

    def run(self, ctx):
        i = 0
        started = time.monotonic()
        while self.running:
            ctx.collect(" ".join(WORDS[(i + k) % len(WORDS)] for k in range(4)))
            i += 1
            ahead = i / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # pacing the generator, not waiting for an event

    def cancel(self):
        self.running = False


def split(line):
    return [(word, 1) for word in line.split()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--every", type=int, default=500)
    options = parser.parse_args()
    every = options.every

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (
        env.add_source(EndlessLines(options.rate), "Endless Lines")
        .flat_map(split)
        .key_by(lambda kv: kv[0])
        .sum(1)
        .filter(lambda kv: kv[1] % every == 0)
        .print()
    )
    env.execute("unbounded word count")


if __name__ == "__main__":
    main()
