"""The Redis Lua scripts of the limits (gateway.limits.admission): ADMIT checks and takes every
limit of a request in one round trip; RENEW extends a live gateway's leases. Times come from Redis
(TIME).
"""

from __future__ import annotations

_LUA_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# First settles earlier requests (lease releases, token corrections) that rode along, then
# admits this one; settling alone is the same call with every limit 0.
# KEYS: service rps log, key rpm log, key tpm log, key tpm amounts, key leases, service leases
# (gateway.limits.rules' slots); the candidate instances' lease sets (outstanding requests),
# best first; with worker slots, the same instances' worker sets; the lease sets to release
# from; the (tpm log, amounts) pairs to correct.
# ARGV: id, rps, second ms, rpm, tpm, tokens, minute ms, max concurrency, lease ms, queue,
# number of instances, of releases, of corrections, service concurrency, workers; the
# released ids; (id, tokens) pairs.
# Limits of 0 are not checked. Returns {reason, retry ms, rpm remaining, rpm reset ms,
# tpm remaining, tpm reset ms, chosen instance (1-based, 0: none), working (1: a worker slot
# taken there, 0: none or it waits for one)}; remaining -1: unlimited.
# With workers, a request works at once only where nobody waits (outstanding < workers), so
# newcomers never overtake the requests waiting at an instance.
ADMIT_LUA = (
    _LUA_PRELUDE
    + """
local id = ARGV[1]
local rps, sec = tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm, tokens, minute = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local conc, lease, queue = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local instances, releases, corrections = tonumber(ARGV[11]), tonumber(ARGV[12]),
  tonumber(ARGV[13])
local sconc, workers = tonumber(ARGV[14]), tonumber(ARGV[15])
local slots = 0
if workers > 0 then slots = instances end

local k, a = 7 + instances + slots, 16
for _ = 1, releases do
  redis.call('ZREM', KEYS[k], ARGV[a])
  k, a = k + 1, a + 1
end
-- a real token count replaces the estimate, while the entry still counts in its window
for _ = 1, corrections do
  local zkey, hkey, member, real = KEYS[k], KEYS[k + 1], ARGV[a], tonumber(ARGV[a + 1])
  if redis.call('ZSCORE', zkey, member) then
    local old = tonumber(redis.call('HGET', hkey, member)) or 0
    redis.call('HSET', hkey, member, real)
    redis.call('HINCRBY', hkey, '#', real - old)
  end
  k, a = k + 2, a + 2
end

local function logged(key, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  return redis.call('ZCARD', key)
end

-- ms until the log has room: when its (count - limit + 1)-th oldest entry leaves the window
local function wait_for_room(key, count, limit, window)
  local entry = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
  return tonumber(entry[2]) + window - now
end

local function oldest_leaves(key, window)
  local entry = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if entry[2] then return tonumber(entry[2]) + window - now end
  return 0
end

-- tokens admitted in the window; expired entries leave the running sum as they go
local function tokens_used(zkey, hkey, window)
  local expired = redis.call('ZRANGEBYSCORE', zkey, '-inf', now - window)
  if #expired > 0 then
    local freed = 0
    for i = 1, #expired, 500 do
      local last = math.min(i + 499, #expired)
      local amounts = redis.call('HMGET', hkey, unpack(expired, i, last))
      for j = 1, #amounts do freed = freed + (tonumber(amounts[j]) or 0) end
      redis.call('HDEL', hkey, unpack(expired, i, last))
    end
    redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now - window)
    redis.call('HINCRBY', hkey, '#', -freed)
  end
  return math.max(tonumber(redis.call('HGET', hkey, '#')) or 0, 0)
end

-- ms until `needed` tokens have left the window, oldest entries first
local function wait_for_tokens(zkey, hkey, needed, window)
  local entries = redis.call('ZRANGE', zkey, 0, -1, 'WITHSCORES')
  local freed = 0
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(redis.call('HGET', hkey, entries[i])) or 0)
    if freed >= needed then return tonumber(entries[i + 1]) + window - now end
  end
  return window
end

local function live_leases(key)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

local rpm_left, rpm_reset, tpm_left, tpm_reset = -1, 0, -1, 0
if rps > 0 then
  local n = logged(KEYS[1], sec)
  if n >= rps then return {1, wait_for_room(KEYS[1], n, rps, sec), -1, 0, -1, 0, 0} end
end
local requests = 0
if rpm > 0 then
  requests = logged(KEYS[2], minute)
  if requests >= rpm then
    local wait = wait_for_room(KEYS[2], requests, rpm, minute)
    return {2, wait, 0, wait, -1, 0, 0}
  end
end
local used = 0
if tpm > 0 then
  used = tokens_used(KEYS[3], KEYS[4], minute)
  if tokens > tpm then return {4, 0, -1, 0, tpm - used, 0, 0} end
  if used + tokens > tpm then
    local wait = wait_for_tokens(KEYS[3], KEYS[4], used + tokens - tpm, minute)
    return {3, wait, -1, 0, tpm - used, wait, 0}
  end
end
if conc > 0 and live_leases(KEYS[5]) >= conc then return {5, 1000, -1, 0, -1, 0, 0} end
if sconc > 0 and live_leases(KEYS[6]) >= sconc then return {7, 1000, -1, 0, -1, 0, 0} end
local chosen, working = 0, 0
if queue > 0 then
  local outstanding = {}
  for i = 1, instances do outstanding[i] = live_leases(KEYS[6 + i]) end
  if workers > 0 then
    for i = 1, instances do
      if outstanding[i] < workers then chosen, working = i, 1; break end
    end
  end
  if chosen == 0 then
    for i = 1, instances do
      if outstanding[i] < queue then chosen = i; break end
    end
  end
  if chosen == 0 then return {6, 1000, -1, 0, -1, 0, 0} end
end

if rps > 0 then
  redis.call('ZADD', KEYS[1], now, id)
  redis.call('PEXPIRE', KEYS[1], sec)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, id)
  redis.call('PEXPIRE', KEYS[2], minute)
  rpm_left, rpm_reset = rpm - requests - 1, oldest_leaves(KEYS[2], minute)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, id)
  redis.call('HSET', KEYS[4], id, tokens)
  redis.call('HINCRBY', KEYS[4], '#', tokens)
  redis.call('PEXPIRE', KEYS[3], minute)
  redis.call('PEXPIRE', KEYS[4], minute)
  tpm_left, tpm_reset = tpm - used - tokens, oldest_leaves(KEYS[3], minute)
end
if conc > 0 then
  redis.call('ZADD', KEYS[5], now + lease, id)
  redis.call('PEXPIRE', KEYS[5], lease)
end
if sconc > 0 then
  redis.call('ZADD', KEYS[6], now + lease, id)
  redis.call('PEXPIRE', KEYS[6], lease)
end
if chosen > 0 then
  redis.call('ZADD', KEYS[6 + chosen], now + lease, id)
  redis.call('PEXPIRE', KEYS[6 + chosen], lease)
end
if working > 0 then
  redis.call('ZADD', KEYS[6 + instances + chosen], now + lease, id)
  redis.call('PEXPIRE', KEYS[6 + instances + chosen], lease)
end
return {0, 0, rpm_left, rpm_reset, tpm_left, tpm_reset, chosen, working}
"""
)

# KEYS: lease sets. ARGV: lease ms, then the lease id held in each set, aligned with KEYS.
RENEW_LUA = (
    _LUA_PRELUDE
    + """
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  if redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], lease)
  end
end
return 0
"""
)

# A request waiting at its instance takes a worker slot there if one is free.
# KEYS: the instance's worker set. ARGV: id, workers, lease ms. Returns 1 if taken, else 0.
SLOT_LUA = (
    _LUA_PRELUDE
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""
)
