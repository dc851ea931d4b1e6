"""The limits' algorithms for this process alone (gateway.limits.admission's fallback while Redis
is down): the same sliding logs and leases as the Lua script, in memory."""

from __future__ import annotations

from collections import deque

from gateway.limits.rules import (
    ADMITTED,
    FIRST_INSTANCE,
    KEY_LEASES,
    KEY_RPM,
    KEY_TPM,
    OVER_CONCURRENCY,
    OVER_RPM,
    OVER_RPS,
    OVER_SERVICE_CONCURRENCY,
    OVER_TPM,
    QUEUE_FULL,
    SERVICE_LEASES,
    SERVICE_RPS,
    TOO_LARGE,
    Demand,
    Verdict,
    ms,
)


class _TokenLog:
    def __init__(self) -> None:
        self.entries: deque[tuple[float, str]] = deque()
        self.amounts: dict[str, int] = {}
        self.used = 0


class LocalLimits:
    """The script's algorithms for this process alone: the fallback while Redis is down."""

    def __init__(self, second_s: float, minute_s: float) -> None:
        self._second = second_s
        self._minute = minute_s
        self._logs: dict[str, deque[tuple[float, str]]] = {}
        self._tokens: dict[str, _TokenLog] = {}
        self._leases: dict[str, set[str]] = {}

    def admit(self, demand: Demand, keys: list[str], request_id: str, now: float) -> Verdict:
        if demand.rate_limit > 0:
            log_ = self._log(keys[SERVICE_RPS], now, self._second)
            if len(log_) >= demand.rate_limit:
                wait = self._wait_for_room(log_, demand.rate_limit, self._second, now)
                return Verdict(OVER_RPS, wait)
        if demand.rpm:
            requests = self._log(keys[KEY_RPM], now, self._minute)
            if len(requests) >= demand.rpm:
                wait = self._wait_for_room(requests, demand.rpm, self._minute, now)
                return Verdict(OVER_RPM, wait, 0, wait)
        if demand.tpm:
            tokens = self._token_log(keys[KEY_TPM], now)
            if demand.tokens > demand.tpm:
                return Verdict(TOO_LARGE, 0, -1, 0, demand.tpm - tokens.used)
            if tokens.used + demand.tokens > demand.tpm:
                wait = self._wait_for_tokens(tokens, tokens.used + demand.tokens - demand.tpm, now)
                return Verdict(OVER_TPM, wait, -1, 0, demand.tpm - tokens.used, wait)
        if demand.max_concurrency and self._held(keys[KEY_LEASES]) >= demand.max_concurrency:
            return Verdict(OVER_CONCURRENCY, 1000)
        if (
            demand.service_concurrency
            and self._held(keys[SERVICE_LEASES]) >= demand.service_concurrency
        ):
            return Verdict(OVER_SERVICE_CONCURRENCY, 1000)
        chosen, working = 0, 0
        if demand.queue_size:
            chosen, working = self._instance(demand, keys)
            if not chosen:
                return Verdict(QUEUE_FULL, 1000)
        return self._take(demand, keys, request_id, now, chosen, working)

    def _instance(self, demand: Demand, keys: list[str]) -> tuple[int, int]:
        """(chosen, working), as the script picks: a worker slot where nobody waits, else a
        place in a queue; (0, 0) when every queue is full."""
        count = len(demand.instances)
        outstanding = [self._held(k) for k in keys[FIRST_INSTANCE : FIRST_INSTANCE + count]]
        if demand.workers:
            for index, held in enumerate(outstanding, start=1):
                if held < demand.workers:
                    return index, 1
        for index, held in enumerate(outstanding, start=1):
            if held < demand.queue_size:
                return index, 0
        return 0, 0

    def _take(
        self,
        demand: Demand,
        keys: list[str],
        request_id: str,
        now: float,
        chosen: int,
        working: int,
    ) -> Verdict:
        rpm_left = rpm_reset = -1
        tpm_left = tpm_reset = -1
        if demand.rate_limit > 0:
            self._logs[keys[SERVICE_RPS]].append((now, request_id))
        if demand.rpm:
            requests = self._logs[keys[KEY_RPM]]
            requests.append((now, request_id))
            rpm_left = demand.rpm - len(requests)
            rpm_reset = ms(requests[0][0] + self._minute - now)
        if demand.tpm:
            tokens = self._tokens[keys[KEY_TPM]]
            tokens.entries.append((now, request_id))
            tokens.amounts[request_id] = demand.tokens
            tokens.used += demand.tokens
            tpm_left = demand.tpm - tokens.used
            tpm_reset = ms(tokens.entries[0][0] + self._minute - now)
        held = []
        if demand.max_concurrency:
            held.append(keys[KEY_LEASES])
        if demand.service_concurrency:
            held.append(keys[SERVICE_LEASES])
        if chosen:
            held.append(keys[FIRST_INSTANCE - 1 + chosen])
        if working:
            held.append(keys[FIRST_INSTANCE - 1 + len(demand.instances) + chosen])
        for key in held:
            self._leases.setdefault(key, set()).add(request_id)
        return Verdict(ADMITTED, 0, rpm_left, rpm_reset, tpm_left, tpm_reset, chosen, working)

    def take_slot(self, key: str, request_id: str, workers: int) -> bool:
        """A worker slot in lease set `key` for a waiting request, if one is free."""
        if self._held(key) >= workers:
            return False
        self._leases.setdefault(key, set()).add(request_id)
        return True

    def _held(self, key: str) -> int:
        return len(self._leases.get(key, ()))

    def release(self, leases: list[str], request_id: str) -> None:
        for key in leases:
            held = self._leases.get(key)
            if held is not None:
                held.discard(request_id)
                if not held:
                    del self._leases[key]

    def correct(self, key: str, request_id: str, tokens: int) -> None:
        log_ = self._tokens.get(key)
        if log_ is not None and request_id in log_.amounts:
            log_.used += tokens - log_.amounts[request_id]
            log_.amounts[request_id] = tokens

    def _log(self, key: str, now: float, window: float) -> deque[tuple[float, str]]:
        entries = self._logs.setdefault(key, deque())
        while entries and entries[0][0] <= now - window:
            entries.popleft()
        return entries

    def _token_log(self, key: str, now: float) -> _TokenLog:
        tokens = self._tokens.setdefault(key, _TokenLog())
        while tokens.entries and tokens.entries[0][0] <= now - self._minute:
            _, gone = tokens.entries.popleft()
            tokens.used -= tokens.amounts.pop(gone, 0)
        return tokens

    @staticmethod
    def _wait_for_room(
        entries: deque[tuple[float, str]], limit: int, window: float, now: float
    ) -> int:
        return ms(entries[len(entries) - limit][0] + window - now)

    def _wait_for_tokens(self, tokens: _TokenLog, needed: int, now: float) -> int:
        freed = 0
        for at, request_id in tokens.entries:
            freed += tokens.amounts.get(request_id, 0)
            if freed >= needed:
                return ms(at + self._minute - now)
        return ms(self._minute)
