import threading
import asyncio
import time
import math
import gc


def work(n):
    return sum(math.sqrt(i) for i in range(n))


def leaf(k):
    time.sleep(0.002)
    return work(k)


def middle(r):
    return [leaf(40) for _ in range(r)]


def thread_fn():
    for _ in range(3):
        middle(2)


async def coro(i):
    await asyncio.sleep(0.003 * i)
    work(40)


async def amain():
    await asyncio.gather(*(coro(i) for i in range(4)))


def main():
    ts = [threading.Thread(target=thread_fn, name=f"worker-{i}") for i in range(3)]
    for t in ts:
        t.start()
    middle(5)
    for t in ts:
        t.join()
    gc.collect()
    asyncio.run(amain())


if __name__ == "__main__":
    main()
