/* An AVX2-only x86-64 CPU for one process tree, on a CPU that has more (LD_PRELOAD it).

   Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, flag `cpuid_fault` in /proc/cpuinfo) makes
   every CPUID instruction trap; the SIGSEGV handler below runs the real CPUID and clears the
   AVX-512, AVX-VNNI and AMX bits before the program sees them. onnxruntime's MLAS, numpy and
   anything else that dispatches on CPUID then pick the kernels an AVX2-only CPU runs (Haswell to
   Skylake client, Zen 1-3), at this core's own speed. Kernels only: the core itself (caches,
   ports, clocks) stays what it is. The faulting flag survives fork and new threads, and execve
   clears it; LD_PRELOAD in the environment sets it again in each new program.

   Build and use: bench/avx2only.sh COMMAND... (it compiles this file and checks the result). */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

static long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

static void on_segv(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    if (ip[0] != 0x0f || ip[1] != 0xa2) { /* not CPUID: a real fault, crash as usual */
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX], a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_cpuid(0);
    if (leaf == 7 && sub == 0) {
        /* AVX512 F, DQ, IFMA, PF, ER, CD, BW, VL */
        b &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        /* AVX512 VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        c &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        /* AVX512 4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512-FP16, AMX-TILE, AMX-INT8 */
        d &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && sub == 1) {
        a &= ~(BIT(4) | BIT(5) | BIT(23)); /* AVX-VNNI, AVX512-BF16, AVX-IFMA */
    }
    regs[REG_RAX] = a;
    regs[REG_RBX] = b;
    regs[REG_RCX] = c;
    regs[REG_RDX] = d;
    regs[REG_RIP] += 2;
}

__attribute__((constructor)) static void avx2only(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &action, NULL);
    if (set_cpuid(0) != 0) {
        static const char message[] =
            "avx2only: this CPU or kernel has no CPUID faulting (arch_prctl ARCH_SET_CPUID)\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(97);
    }
}
