"""Streaming word count, Flink's WordCount example: Source -> Flat Map -> Keyed Aggregation -> Sink."""

from raylink.api import StreamExecutionEnvironment

LINES = [
    "to be or not to be",
    "that is the question",
    "whether tis nobler in the mind to suffer",
]


def split(line):
    return [(word, 1) for word in line.split()]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = env.from_collection(LINES).flat_map(split).key_by(lambda kv: kv[0]).sum(1)
    counts.print()
    env.execute("word count")


if __name__ == "__main__":
    main()
