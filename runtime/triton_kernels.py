"""Triton kernels of the comparison backend: a tiled matmul and FlashAttention (v2 tiling).

Forward: each program owns a block of queries and streams blocks of keys and
values, keeping a running row max ``m`` and normaliser ``l`` (online softmax),
so the score matrix never exists in memory; it saves ``O`` and the log-sum-exp
``L = m + log l``. Backward recomputes each score block from Q, K and the
saved ``L`` (``P = exp(S - L)``) instead of storing P: one kernel per key block
accumulates dK and dV, one per query block accumulates dQ, with
``D = rowsum(dO * O)`` precomputed. Causal kernels skip the blocks the mask
covers whole (keys after a query block's last row; queries before a key
block's first column), about half the work. ``DOT`` is each dot's input precision:
``"ieee"`` (full fp32, the default of the Python API, so results compare with
numpy at fp32 tolerances) or ``"tf32"`` (tensor cores; about 1e-3 relative).

Imported only by runtime/triton_backend.py, after it has decided whether to set
TRITON_INTERPRET=1 (no CUDA device: the kernels then run on the CPU).
"""
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(A, B, C, M, N, K, sab, sam, sak, sbb, sbk, sbn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    pid_m, pid_n, bat = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(A + bat * sab + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(B + bat * sbb + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=DOT)
    tl.store(C + bat * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attn_fwd_kernel(Q, K, V, O, L, sm_scale, NQ, NK, D,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
                    DOT: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d[None, :] < D
    q = tl.load(Q + bh * NQ * D + offs_m[:, None] * D + offs_d[None, :], mask=(offs_m[:, None] < NQ) & dmask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = NK
    if CAUSAL:   # key blocks past the last query of this block are all masked
        hi = tl.minimum(NK, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kv = bh * NK * D + offs_n[:, None] * D + offs_d[None, :]
        kvmask = (offs_n[:, None] < NK) & dmask
        k = tl.load(K + kv, mask=kvmask, other=0.0)
        v = tl.load(V + kv, mask=kvmask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT) * sm_scale
        valid = (offs_m[:, None] < NQ) & (offs_n[None, :] < NK)
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows with nothing seen yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_safe[:, None]
    tl.store(O + bh * NQ * D + offs_m[:, None] * D + offs_d[None, :], acc, mask=(offs_m[:, None] < NQ) & dmask)
    tl.store(L + bh * NQ + offs_m, m_i + tl.log(l_safe), mask=offs_m < NQ)


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, L, DELTA, DK, DV, sm_scale, NQ, NK, D,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
                         DOT: tl.constexpr):
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d[None, :] < D
    kv = bh * NK * D + offs_n[:, None] * D + offs_d[None, :]
    kvmask = (offs_n[:, None] < NK) & dmask
    k = tl.load(K + kv, mask=kvmask, other=0.0)
    v = tl.load(V + kv, mask=kvmask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    lo = 0
    if CAUSAL:   # query blocks before this block's first key are all masked
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
    for m0 in range(lo, NQ, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        qo = bh * NQ * D + offs_m[:, None] * D + offs_d[None, :]
        qmask = (offs_m[:, None] < NQ) & dmask
        q = tl.load(Q + qo, mask=qmask, other=0.0)
        do = tl.load(DO + qo, mask=qmask, other=0.0)
        lse = tl.load(L + bh * NQ + offs_m, mask=offs_m < NQ, other=0.0)
        delta = tl.load(DELTA + bh * NQ + offs_m, mask=offs_m < NQ, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT) * sm_scale
        valid = (offs_m[:, None] < NQ) & (offs_n[None, :] < NK)
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)          # S recomputed, P from the saved L
        dv += tl.dot(tl.trans(p), do, input_precision=DOT)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds), q, input_precision=DOT) * sm_scale
    tl.store(DK + kv, dk, mask=kvmask)
    tl.store(DV + kv, dv, mask=kvmask)


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, L, DELTA, DQ, sm_scale, NQ, NK, D,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
                       DOT: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d[None, :] < D
    qo = bh * NQ * D + offs_m[:, None] * D + offs_d[None, :]
    qmask = (offs_m[:, None] < NQ) & dmask
    q = tl.load(Q + qo, mask=qmask, other=0.0)
    do = tl.load(DO + qo, mask=qmask, other=0.0)
    lse = tl.load(L + bh * NQ + offs_m, mask=offs_m < NQ, other=0.0)
    delta = tl.load(DELTA + bh * NQ + offs_m, mask=offs_m < NQ, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = NK
    if CAUSAL:   # key blocks past the last query of this block are all masked
        hi = tl.minimum(NK, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kv = bh * NK * D + offs_n[:, None] * D + offs_d[None, :]
        kvmask = (offs_n[:, None] < NK) & dmask
        k = tl.load(K + kv, mask=kvmask, other=0.0)
        v = tl.load(V + kv, mask=kvmask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT) * sm_scale
        valid = (offs_m[:, None] < NQ) & (offs_n[None, :] < NK)
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds, k, input_precision=DOT) * sm_scale
    tl.store(DQ + qo, dq, mask=qmask)
