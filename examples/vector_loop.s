; y[i] = relu(x[i] * 3 + bias) for N rows of COLS int8 lanes.
;
; N is not known when this is assembled: the host writes it to r1 (and the bias to r2)
; before launch, and the loop registers take their trip counts from r1. One binary serves
; every N from 0 to 255. DRAM: x at X_DRAM, y at Y_DRAM, both N x COLS int8.
; (Loads may run ahead of the VPU by up to N tokens; a token counter holds at most
;  TOKEN_MAX = 255, so a larger N needs the VPU to hand tokens back to the loads.)
.config tiny

.equ X_DRAM, 0x000
.equ Y_DRAM, 0x800
.equ X_SPM, 0
.equ Y_SPM, 512
.equ T_ACC, 0                          ; int32 temporaries

        loop    l0, r1, s0=1, s1=COLS      ; load: SPM row i <- DRAM row i
        loop    l1, r1, s0=1, s1=1         ; VPU: row i of every operand
        loop    l2, r1, s0=COLS, s1=1      ; store: DRAM row i <- SPM row i
        dma.ld  spm[X_SPM], dram[X_DRAM], rep=l0:1, signal=vpu           ; each row signals
        vmul    acc[T_ACC], spm[X_SPM], 3, rep=l1:1, wait=load           ; ... and is used at once
        vadd    acc[T_ACC], acc[T_ACC], r2, rep=l1:1                     ; + bias (a host argument)
        vrelu   spm[Y_SPM], acc[T_ACC], rep=l1:1, sync=once, signal=store ; int8, saturated
        dma.st  dram[Y_DRAM], spm[Y_SPM], rep=l2:1, sync=once, wait=vpu
        halt
