import math
import time
import threading


def hot(n):
    s = 0.0
    for i in range(n):
        s += math.sin(i)
    return s


def cold():
    time.sleep(0.01)


def worker():
    for _ in range(30):
        hot(20000)


t = threading.Thread(target=worker, name="busy")
t.start()
for _ in range(40):
    hot(30000)
    cold()
t.join()
