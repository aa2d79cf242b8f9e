-- _fence_now.lua: a quick path's next fence, calling no helper, put after
-- _fence_last.lua's lines (which set `n`). It reads the clock and sets
-- `fence`: next_fence_at's rule, the larger of n + 1 and TIME in µs (the
-- arithmetic on TIME's two strings is the VM's own).
local now = redis.call('TIME')
local fence = now[1] * 1000000 + now[2]
if n and n >= fence then fence = n + 1 end
