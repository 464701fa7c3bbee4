"""The memory bank sharded over every replica (``--shard_bank``), of one machine or of every
worker of a cluster: replica r of R holds the contiguous rows ``[start_r, stop_r)`` of
`memory_bank.MemoryBank`'s state (`shard_bounds`) and the densities of its labelled rows, so
each holds about N / R rows; a process makes and holds only its own replicas' shards.

A step all-gathers the global batch; each replica computes its shard's share, and the shares
are all-gathered (across workers too) and merged exactly:

- aggregation loss: the shard's (max, sum, weighted sum) `losses.SoftmaxSums`, combined with
  rescaling by exp(shard max - global max) (`combine_shards`);
- propagation: the shard's top-K labelled rows per example (`shard_candidates`), merged by a
  top-K over all shards' candidates (`merge_candidates`) before the vote;
- density refresh: each labelled row's top-T rows of the shard, merged likewise.

Each replica writes the rows it owns. The checkpoint holds each shard's rows as slices of
`bank.Bank`'s names (`bank_slices`), so either bank restores the other's, at any replica or
worker count; saving or restoring a sliced checkpoint makes no tensor of the whole bank. The
shards are plain variables made outside the strategy's scope, so no worker's initial rows are
replaced by another's."""

import functools
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from llp_tf.core import bank_dtype, bank_slices, hyperparameters, label_encoding, losses, \
    memory_bank, propagation, variable_rows
from llp_tf.core.bank import STATE_FIELDS, Bank, BankState, BankWrite
from llp_tf.tensor_types import Array, FloatTensor, IntTensor


def shard_bounds(num_rows: int, num_shards: int) -> list[tuple[int, int]]:
    """(start, stop) of each shard's contiguous rows; sizes differ by at most one."""
    sizes = [num_rows // num_shards + (shard < num_rows % num_shards)
             for shard in range(num_shards)]
    stops = np.cumsum(sizes)
    return [(int(stop - size), int(stop)) for size, stop in zip(sizes, stops)]


def combine_shards(shard_sums: Sequence[losses.SoftmaxSums]) -> losses.SoftmaxSums:
    """The `losses.SoftmaxSums` over the union of disjoint shards' rows from each shard's."""
    return functools.reduce(losses.combine, shard_sums)


def shard_candidates(queries: FloatTensor, rows: FloatTensor, k: int,
                     row_offsets: FloatTensor | None = None,
                     block_rows: int = propagation.DEFAULT_BLOCK_ROWS
                     ) -> tuple[FloatTensor, IntTensor]:
    """`propagation.nearest_rows` of one shard's ``rows`` float32 [n, D] (n static, maybe 0),
    searched ``block_rows`` at a time, padded to k candidates: (scores float32 [B, k], -inf
    past n; row indices int32 [B, k], -1 past n)."""
    num_rows = int(rows.shape[0])
    found = min(int(k), num_rows)
    batch = tf.shape(queries)[0]
    if found:
        scores, index = propagation.nearest_rows(queries, rows, found, row_offsets,
                                                 block_rows)
    else:
        scores, index = tf.zeros([batch, 0]), tf.zeros([batch, 0], tf.int32)
    if found < k:
        scores = tf.concat([scores, tf.fill([batch, k - found], -np.inf)], axis=1)
        index = tf.concat([index, tf.fill([batch, k - found], -1)], axis=1)
    return scores, index


def merge_candidates(scores: FloatTensor, values: IntTensor, k: int
                     ) -> tuple[FloatTensor, IntTensor]:
    """Top-k of the candidates ``scores`` float32 [B, S] and their ``values`` int [B, S] (all
    shards' side by side): (scores [B, k], values [B, k])."""
    scores, position = tf.math.top_k(scores, k=k, sorted=False)
    return scores, tf.gather(values, position, batch_dims=1)


def _gather_shares(tensors):
    """Every replica's ``tensors`` stacked on a new axis 0 [R, ...] (R = 1 outside a strategy)."""
    tensors = tf.nest.map_structure(lambda t: tf.identity(t)[tf.newaxis], tensors)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors
    return context.all_gather(tensors, axis=0)


def _local_part(global_values, local_size):
    """This replica's consecutive part of an all-gathered global batch [B, ...]."""
    sizes = _gather_shares(local_size)
    replica = _replica_id()
    offset = tf.reduce_sum(sizes[:replica])
    return global_values[offset:offset + local_size]


def _replica_id():
    context = tf.distribute.get_replica_context()
    return 0 if context is None else int(tf.get_static_value(context.replica_id_in_sync_group))


class _Shard:
    """One replica's rows ``[start, stop)``: variables on its device, not tracked by
    checkpoints (the bank's `bank_slices.SlicedState` views are)."""

    def __init__(self, state: dict[str, Array], bounds: tuple[int, int],
                 labelled_bounds: tuple[int, int], device: str | None, dim: int,
                 seed: int, embedding_dtype: tf.DType) -> None:
        """``state``: `memory_bank.initial_state` of the rows ``bounds``, emptied as the
        variables are made (each array freed once its variable holds it); the embeddings are
        drawn into their variable of ``embedding_dtype`` a block at a time
        (`memory_bank.initial_embeddings`)."""
        self.start, self.stop = bounds
        self.labelled_start, self.labelled_stop = labelled_bounds
        with tf.device(device):
            self.labelled_rows = tf.constant(state.pop("labelled_index") - self.start)
            self.embeddings = memory_bank.initial_embeddings(dim, seed, *bounds,
                                                             embedding_dtype)
            for name in ("labels", "confidence", "is_labelled", "density"):
                setattr(self, name, tf.Variable(state.pop(name), trainable=False, name=name))

    def owned(self, indices: IntTensor) -> tuple[tf.Tensor, IntTensor]:
        """(whether this shard owns each of ``indices`` int64 [B], its local row or 0)."""
        owned = (indices >= self.start) & (indices < self.stop)
        return owned, tf.where(owned, indices - self.start, tf.zeros_like(indices))


def _first_local_replica(strategy: tf.distribute.Strategy) -> int:
    """The replica id in sync of this process's first replica (0 but on a cluster's workers
    after the first)."""
    if strategy.num_replicas_in_sync == 1:
        return 0
    ids = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
    return int(strategy.experimental_local_results(ids)[0])


class ShardedMemoryBank(tf.Module, Bank):
    """`memory_bank.MemoryBank`'s state, sharded over every replica of ``strategy`` (module
    docstring); the interface is `Bank`'s. Create it outside ``strategy.scope()``, in every
    process of a cluster; its batch methods run in replica context (`strategy.run`) or
    outside any strategy, not in cross-replica context. ``embeddings``, ``labels``,
    ``confidence``, ``density`` and ``is_labelled`` are `bank_slices.SlicedState` views of
    this process's shards, ``labelled_index`` a variable. ``shards`` are this process's,
    ``num_shards`` the replicas' count over all processes."""

    def __init__(self, strategy: tf.distribute.Strategy, num_examples: int, dim: int,
                 num_classes: int, labelled_index: Array | IntTensor,
                 labelled_classes: Array | IntTensor,
                 momentum: float = hyperparameters.BANK_MOMENTUM, seed: int = 0,
                 embedding_dtype: str | tf.DType = "float32",
                 name: str = "memory_bank") -> None:
        """Arguments as `MemoryBank`'s, the same initial state; ``strategy`` names the devices."""
        super().__init__(name=name)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1); got {momentum}.")
        self.embedding_dtype = bank_dtype.storage_dtype(embedding_dtype)
        if tf.distribute.has_strategy():
            raise ValueError("Create a ShardedMemoryBank outside strategy.scope(): its shards "
                             "are variables of one device each.")
        labelled_index, labelled_classes = memory_bank.validated_split(
            num_examples, num_classes, labelled_index, labelled_classes)
        try:
            devices = tuple(strategy.extended.worker_devices)
        except RuntimeError:  # the default strategy
            devices = (None,)
        self.num_shards = int(strategy.num_replicas_in_sync)
        if num_examples < self.num_shards:
            raise ValueError(f"{num_examples} rows cannot fill {self.num_shards} shards.")
        self.num_examples, self.dim, self.num_classes = num_examples, dim, num_classes
        self.num_labelled = int(labelled_index.size)
        self.momentum = float(momentum)
        self._first = _first_local_replica(strategy)
        bounds = shard_bounds(num_examples, self.num_shards)
        labelled_bounds = [tuple(int(b) for b in np.searchsorted(labelled_index, pair))
                           for pair in bounds]
        self._stops = [stop for _, stop in bounds]
        self._most_labelled = max(stop - start for start, stop in labelled_bounds)
        mine = slice(self._first, self._first + len(devices))
        shards = [_Shard(memory_bank.initial_state(num_examples, dim, num_classes,
                                                   labelled_index, labelled_classes, rows=pair),
                         pair, labelled, device, dim, seed, self.embedding_dtype)
                  for pair, labelled, device in zip(bounds[mine], labelled_bounds[mine],
                                                    devices)]
        # In a non-trackable holder: checkpoints see only the views of the shards.
        self._shard_holder = memory_bank.Untracked(tuple(shards))
        self._strategy_holder = memory_bank.Untracked(strategy)
        for name in ("embeddings", "labels", "confidence", "is_labelled"):
            setattr(self, name, bank_slices.SlicedState([getattr(s, name) for s in shards],
                                                        bounds, self._first))
        self.density = bank_slices.SlicedState([s.density for s in shards], labelled_bounds,
                                               self._first)
        with tf.device("CPU:0"):
            self.labelled_index = tf.Variable(labelled_index, trainable=False,
                                              name="labelled_index")

    @property
    def shards(self) -> tuple[_Shard, ...]:
        """This process's replicas' `_Shard`s, in replica order."""
        return self._shard_holder.value

    @property
    def state(self) -> BankState:
        """`Bank.state`: the views of this process's shards."""
        return BankState(**{name: getattr(self, name) for name in STATE_FIELDS})

    @property
    def held_rows(self) -> tuple[int, int]:
        """`Bank.held_rows`: those of this process's shards."""
        return self.shards[0].start, self.shards[-1].stop

    def read_rows(self, names: Sequence[str], start: int, stop: int) -> dict[str, Array]:
        """`Bank.read_rows`: each overlapping shard's rows gathered, joined in row order."""
        if not self.held_rows[0] <= start <= stop <= self.held_rows[1]:
            raise ValueError(f"rows [{start}, {stop}) are not all within the held rows "
                             f"{list(self.held_rows)}.")
        pieces = {name: [] for name in names}
        for shard in self.shards:
            first, last = max(start, shard.start), min(stop, shard.stop)
            if first < last or (start == stop and shard is self.shards[0]):
                for name in names:
                    pieces[name].append(variable_rows.rows(
                        getattr(shard, name), first - shard.start, last - first).numpy())
        return {name: np.concatenate(parts) if len(parts) > 1 else parts[0]
                for name, parts in pieces.items()}

    def _shard(self) -> _Shard:
        return self.shards[_replica_id() - self._first]

    def read(self, indices: IntTensor) -> tuple[IntTensor, FloatTensor]:
        """`Bank.read`: each row's label and confidence from the shard that owns it."""
        indices = tf.cast(indices, tf.int64)
        global_index = memory_bank.gather_global_batch(indices)
        shard = self._shard()
        _, rows = shard.owned(global_index)
        shares = _gather_shares((tf.gather(shard.labels, rows),
                                 tf.gather(shard.confidence, rows)))
        # Each row's value from the shard that owns it (the others read their row 0): [R, B]
        # -> [B].
        stops = tf.constant(self._stops, tf.int64)
        owner = tf.searchsorted(stops, global_index, side="right")
        size = tf.shape(indices)[0]
        return tuple(_local_part(tf.gather(tf.transpose(share), owner, batch_dims=1), size)
                     for share in shares)

    def aggregation_loss(self, embeddings: FloatTensor, labels: IntTensor,
                         temperature: float = hyperparameters.TEMPERATURE,
                         instance_labels: bool = False) -> FloatTensor:
        """`Bank.aggregation_loss`: each shard's `losses.bank_sums` of the global batch,
        combined (`combine_shards`)."""
        shard = self._shard()
        if instance_labels:
            row_labels = label_encoding.instance_labels(
                tf.range(shard.start, shard.stop, dtype=tf.int64), self.num_classes)
        else:
            row_labels = shard.labels
        labels = tf.cast(labels, tf.int64)
        size = tf.shape(labels)[0]
        embeddings = tf.cast(embeddings, tf.float32)
        batch = memory_bank.gather_global_batch(
            {"embeddings": tf.stop_gradient(embeddings), "labels": labels})
        shares = _gather_shares(losses.bank_sums(
            batch["embeddings"] / float(temperature), shard.embeddings, row_labels,
            batch["labels"]))
        all_rows, same_rows = (
            combine_shards([losses.SoftmaxSums(*(part[r] for part in sums))
                            for r in range(self.num_shards)])
            for sums in shares)
        loss, gradient = losses.loss_from_sums(all_rows, same_rows, temperature)
        return losses.with_gradient(embeddings, _local_part(loss, size),
                                    _local_part(gradient, size))

    def propagate(self, embeddings: FloatTensor, k: int = hyperparameters.K,
                  temperature: float = hyperparameters.TEMPERATURE,
                  local_weights: bool = True) -> tuple[IntTensor, FloatTensor]:
        """`Bank.propagate`: each shard's top-k labelled rows of the global batch, merged
        before `propagation.class_vote`."""
        embeddings = tf.cast(embeddings, tf.float32)
        queries = memory_bank.gather_global_batch(embeddings) / float(temperature)
        shard = self._shard()
        offsets = propagation.density_offsets(shard.density) if local_weights else None
        scores, index = shard_candidates(
            queries, variable_rows.GatheredRows(shard.embeddings, shard.labelled_rows), k,
            offsets)
        if shard.labelled_stop > shard.labelled_start:
            classes = tf.gather(shard.labels,
                                tf.gather(shard.labelled_rows, tf.maximum(index, 0)))
            classes = tf.where(index >= 0, classes, -tf.ones_like(classes))
        else:  # no candidates
            classes = -tf.ones_like(index, tf.int64)
        scores, classes = _gather_shares((scores, classes))
        # [R, B, k] -> [B, R k]: every shard's candidates side by side.
        scores, classes = (tf.reshape(tf.transpose(t, [1, 0, 2]), [tf.shape(t)[1], -1])
                           for t in (scores, classes))
        scores, classes = merge_candidates(scores, classes, k)
        class_weights = propagation.class_vote(scores, classes, self.num_classes)
        size = tf.shape(embeddings)[0]
        return (_local_part(tf.argmax(class_weights, axis=1), size),
                _local_part(tf.reduce_max(class_weights, axis=1), size))

    def nearest_rows(self, embeddings: FloatTensor) -> IntTensor:
        """`Bank.nearest_rows`: each shard's nearest row merged (ties to the lowest index, as
        unsharded)."""
        embeddings = tf.cast(embeddings, tf.float32)
        shard = self._shard()
        scores, index = shard_candidates(memory_bank.gather_global_batch(embeddings),
                                         shard.embeddings, 1)
        index = tf.where(index >= 0, tf.cast(index, tf.int64) + shard.start, -1)
        scores, index = _gather_shares((scores, index))
        # [R, B, 1] -> [B, R], shards in row order: top_k keeps the first of equal scores.
        scores, index = (tf.transpose(t[:, :, 0]) for t in (scores, index))
        _, index = merge_candidates(scores, index, 1)
        return _local_part(index[:, 0], tf.shape(embeddings)[0])

    def update(self, write: BankWrite) -> None:
        """`Bank.update`: the global batch all-gathered, each replica writes its rows."""
        batch = memory_bank.global_update(write)
        shard = self._shard()
        owned, rows = shard.owned(batch["indices"])
        batch = {name: tf.boolean_mask(value, owned) for name, value in batch.items()}
        batch["indices"] = tf.boolean_mask(rows, owned)
        memory_bank.write_rows(shard, batch, self.momentum)

    def refresh_density(self, t: int = hyperparameters.T,
                        temperature: float = hyperparameters.TEMPERATURE,
                        chunk_size: int = hyperparameters.DENSITY_CHUNK_SIZE,
                        normalisation: str = propagation.DENSITY_NORMALISATIONS[0]) -> None:
        """`Bank.refresh_density` of every shard's labelled rows: chunks of about
        ``chunk_size`` queries, one `strategy.run` each (`_refresh_density_chunk`), so a
        replica holds one chunk's queries, similarities and candidates."""
        propagation.check_normalisation(normalisation)
        share = max(1, int(chunk_size) // self.num_shards)
        most = self._most_labelled
        t = min(int(t), self.num_examples)

        def body(chunk):
            self._strategy_holder.value.run(
                self._refresh_density_chunk,
                args=(chunk, share, t, float(temperature), normalisation))
            return chunk + 1

        # parallel_iterations=1: one chunk alive at a time.
        tf.while_loop(lambda chunk: chunk < -(-most // share), body, [0],
                      parallel_iterations=1)

    def _refresh_density_chunk(self, chunk, share, t, temperature, normalisation):
        """Each replica's labelled rows ``[chunk share, (chunk + 1) share)`` all-gathered as
        queries; each shard's top-t rows of every query, merged, then their logsumexp (for
        "paper" minus log Z: each shard's logsumexp over its rows, all-gathered and combined
        by a logsumexp, exact); each replica writes its rows' rho. Each shard is searched
        `propagation.score_block_rows` rows at a time."""
        shard, replicas = self._shard(), self.num_shards
        own_rows = shard.labelled_stop - shard.labelled_start
        start = tf.minimum(chunk * share, own_rows)
        stop = tf.minimum(start + share, own_rows)
        own = variable_rows.rows(variable_rows.GatheredRows(shard.embeddings, shard.labelled_rows),
                                 start, stop - start)
        # Padded to `share` rows: every replica gathers the same shape.
        own = tf.pad(own, [[0, share - (stop - start)], [0, 0]])
        queries = tf.reshape(_gather_shares(own), [replicas * share, -1])
        block_rows = propagation.score_block_rows(replicas * share, t)
        scores, _ = shard_candidates(queries / temperature, shard.embeddings, t,
                                     block_rows=block_rows)
        # [R, R share, t] -> [R share, R t]: every shard's candidates side by side.
        scores = tf.reshape(tf.transpose(_gather_shares(scores), [1, 0, 2]),
                            [replicas * share, replicas * t])
        nearest, _ = tf.math.top_k(scores, k=t, sorted=False)
        log_density = propagation.log_density_of_nearest(nearest)
        if normalisation == "paper":
            # [R, R share]: each shard's log Z part (a shard holds at least one row).
            parts = _gather_shares(propagation.log_partition(queries / temperature,
                                                             shard.embeddings, block_rows))
            log_density -= tf.reduce_logsumexp(parts, axis=0)
        replica = _replica_id()
        mine = log_density[replica * share:replica * share + (stop - start)]
        shard.density.scatter_update(tf.IndexedSlices(tf.exp(mine), tf.range(start, stop)))

