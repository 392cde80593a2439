"""The largest values the model can hold: what it counts in 64-bit integers and floats, and
what it keeps per tick or per attempt. Validation refuses a playbook beyond them before a
run (``orchestrator/playbook``); an operation beyond them during a run is refused and
journalled (``base.BadArgument``), and the world goes on."""

#: every number, in absolute value, and the requests a second a population sends (integers are
#: exact in a float up to 2^53, about 9e15; the model counts clients and requests in 64-bit integers)
LARGEST_NUMBER = 1e15
#: the most attempts a retry policy may count (the model keeps requests by attempt: 0, unlimited, needs no more)
MOST_ATTEMPTS = 1000
#: the longest delay a retry policy may give, and the longest timeout, in seconds: a day (the model
#: keeps the requests waiting by the tick, as far ahead as the longest of them)
LONGEST_DELAY = 86_400.0
#: the cells a population's timing wheel may hold: the slots its longest delay and timeouts
#: reach ahead (delay / tick) times the attempts it counts (max_attempts); three such wheels of
#: eight bytes a cell, so at most 400 MB a population
MOST_WHEEL_CELLS = 2**24
