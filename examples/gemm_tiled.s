; Tiled int8 GEMM: C[M x N] (int32) = A[M x K] (int8) @ B[K x N] (int8).
;
; Written for any config whose array divides K and N (the constants ROWS and COLS come from
; the config). DRAM layout, all row-major:
;   A at A_DRAM: M x K int8      B at B_DRAM: K x N int8      C at C_DRAM: M x N int32 (LE)
;
; Repeat registers load A and B with one instruction each; scalar loops walk the tiles with
; register-indexed addresses; tokens order the units (load -> mxu -> store).
.config tiny

.equ M, 8
.equ K, 8
.equ N, 8
.equ KT, K / ROWS                ; K tiles
.equ NT, N / COLS                ; N tiles
.equ A_DRAM, 0x0000
.equ B_DRAM, 0x0400
.equ C_DRAM, 0x0800
.equ A_SPM, 0                    ; K tile kt of A: SPM rows A_SPM + kt*M, row m = A[m, kt*ROWS..]
.equ B_SPM, KT * M               ; weight tile (nt, kt): SPM rows B_SPM + (nt*KT + kt)*ROWS
.equ C_ACC, 0                    ; N tile nt of C: ACC rows C_ACC + nt*M

; 1. A: one instance per K tile (M rows of ROWS lanes each).
        loop    l0, KT, s0=M, s1=ROWS
        dma.ld  spm[A_SPM], dram[A_DRAM], rows=M, len=ROWS, rstride=K, rep=l0:1
; 2. B: one instance per weight tile, in the order the MXU uses them (nt outer, kt inner);
;    each signals the MXU, so matmuls start as soon as their tile has arrived.
        loop    l1, NT, s0=KT*ROWS, s1=COLS
        loop    l2, KT, s0=ROWS, s1=ROWS*N
        dma.ld  spm[B_SPM], dram[B_DRAM], rows=ROWS, len=COLS, rstride=N, rep=l1:2, signal=mxu

; 3. For each N tile: C tile = sum over kt of A tile kt @ weight tile (nt, kt).
        seti    r1, 0                ; nt
        seti    r3, C_ACC            ; ACC row of this N tile
        seti    r6, 0                ; byte offset of this N tile in C
        seti    r7, B_SPM            ; SPM row of the next weight tile
        seti    r10, NT
        seti    r11, KT
ntile:  mxu.lw  spm[r7], wait=load   ; kt = 0: overwrite the ACC tile
        mxu.mm  acc[r3], spm[A_SPM], n=M
        addi    r7, r7, ROWS
        seti    r2, 1                ; kt
        seti    r5, A_SPM + M        ; SPM row of A's K tile kt
        bge     r2, r11, kdone
kloop:  mxu.lw  spm[r7], wait=load   ; kt >= 1: accumulate
        mxu.mma acc[r3], spm[r5], n=M
        addi    r7, r7, ROWS
        addi    r5, r5, M
        addi    r2, r2, 1
        blt     r2, r11, kloop
        ; a zero-row matmul retires after every earlier one: it carries the token to the store
kdone:  mxu.mm  acc[r3], spm[A_SPM], n=0, signal=store
        dma.st  dram[C_DRAM + r6], acc[r3], rows=M, len=COLS, rstride=4*N, wait=mxu
        addi    r3, r3, M
        addi    r6, r6, 4*COLS
        addi    r1, r1, 1
        blt     r1, r10, ntile
        halt
