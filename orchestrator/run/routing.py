"""The `Orchestrator`'s routing (orchestrator.run.replay): which intake worker an
admitted call goes to, the router asked on the prefix cache as it is."""

from __future__ import annotations

from orchestrator.control.router import FillCandidate
from orchestrator.run.plugin_checks import checked_route, plugin_failed
from orchestrator.run.sessions import Pending
from storage.tiers import Tier
from workers.kv_policy import KVPolicy


class CallRouting:
    """The `Orchestrator`'s routing methods; the run sets the `runtime`, `router`,
    `router_takes_new_tokens`, `kv_policy` and `_kept_candidates` they use."""

    def _candidates(self, resident: dict[str, int] | None = None) -> list[FillCandidate]:
        """The intake workers as the router sees them; `resident`: tokens of the call's
        prefix in each one's HBM, by name (retained KV)."""
        out = []
        # Each worker's candidate of the last call routed, again while its figures hold:
        # a profile of 1,152 GPUs (24 fill workers, thousands of calls queued) showed
        # building them anew at every call at 3% of the run.
        kept = self._kept_candidates
        for w in self.runtime.intake_workers():  # fill workers and mixed workers
            queued, accepting = w.queue.queued_tokens, w.accepting
            tokens = resident.get(w.name, 0) if resident else 0
            last = kept.get(w.name)
            if (last is None or last[0] is not w.spec or last[1].queued_tokens != queued
                    or last[1].accepting != accepting or last[1].resident_tokens != tokens):
                last = kept[w.name] = (w.spec, FillCandidate(
                    name=w.name, phase=w.spec.phase.name.lower(), node=w.spec.node,
                    queued_tokens=queued, accepting=accepting, resident_tokens=tokens))
            out.append(last[1])
        return out

    def route(self, pending: Pending, now_s: float) -> bool:
        worker, candidates = self._choose(pending.request)
        if checked_route(worker, self.router, candidates) is None:
            return False
        self.runtime.submit_fill(worker, pending.request, now_s)
        return True

    def fill_pool(self, pending: Pending) -> str | None:
        """The fill pool (phase) the router would send `pending` to now, on the prefix
        cache as it is; None when it would hold the call."""
        worker, candidates = self._choose(pending.request)
        for c in candidates:
            if c.name == worker:
                return c.phase
        return None

    def _choose(self, req) -> tuple[str | None, list[FillCandidate]]:
        """The router's worker for `req` now, and the candidates it chose from."""
        match = self.runtime.store.match(req.block_ids)
        nodes = frozenset()
        resident = None
        if match.blob_ids:
            nodes = frozenset(loc.holder for loc in self.runtime.store.holders(match.blob_ids[-1])
                              if loc.tier is Tier.DRAM)
            if self.kv_policy is KVPolicy.RETAIN:
                resident = self.runtime.resident_tokens(match.blob_ids)
        candidates = self._candidates(resident)
        try:
            if self.router_takes_new_tokens:
                worker = self.router.choose(match.matched_tokens, candidates, nodes,
                                            new_tokens=req.input_tokens - match.matched_tokens)
            else:
                worker = self.router.choose(match.matched_tokens, candidates, nodes)
        except Exception as exc:
            raise plugin_failed("router", self.router, exc) from exc
        return worker, candidates
