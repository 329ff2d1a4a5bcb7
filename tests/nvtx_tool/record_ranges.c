/* A minimal NVTX tool for the tests: what Nsight Systems is to a profiled process, reduced to a log.
 *
 * Loaded by every NVTX v3 client in the process (the nvtx package, pyprof's C extension, ...) from
 * NVTX_INJECTION64_PATH, it takes over domain creation, string registration, push and pop, and
 * writes one line per push/pop to the file named by PYPROF_TEST_NVTX_LOG:
 *     push <TAB> thread <TAB> domain <TAB> message
 *     pop  <TAB> thread <TAB> domain
 * (messages are pyprof's JSON texts: no raw tabs or newlines). Built by tests/test_annotate_nvtx_tool.py. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nvtx3/nvToolsExt.h"

typedef struct { char name[128]; } domain_t;

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *
domain_name(nvtxDomainHandle_t h)
{
    return h ? ((domain_t *)h)->name : "";
}

static nvtxDomainHandle_t NVTX_API
create_domain(const char *name)
{
    domain_t *d = calloc(1, sizeof *d);
    if (d != NULL)
        strncpy(d->name, name, sizeof d->name - 1);
    return (nvtxDomainHandle_t)d;
}

static nvtxStringHandle_t NVTX_API
register_string(nvtxDomainHandle_t h, const char *s)
{
    (void)h;
    return (nvtxStringHandle_t)strdup(s);
}

static int NVTX_API
push(nvtxDomainHandle_t h, const nvtxEventAttributes_t *a)
{
    const char *msg = "";
    if (a != NULL && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii != NULL)
        msg = a->message.ascii;
    else if (a != NULL && a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered != NULL)
        msg = (const char *)a->message.registered;
    pthread_mutex_lock(&lock);
    fprintf(out, "push\t%ld\t%s\t%s\n", (long)syscall(SYS_gettid), domain_name(h), msg);
    pthread_mutex_unlock(&lock);
    return 0;
}

static int NVTX_API
pop(nvtxDomainHandle_t h)
{
    pthread_mutex_lock(&lock);
    fprintf(out, "pop\t%ld\t%s\n", (long)syscall(SYS_gettid), domain_name(h));
    pthread_mutex_unlock(&lock);
    return 0;
}

static void
flush_log(void)
{
    if (out != NULL)
        fflush(out);
}

__attribute__((visibility("default"))) int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    const char *path = getenv("PYPROF_TEST_NVTX_LOG");
    if (cb == NULL || path == NULL || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)
            || size <= NVTX_CBID_CORE2_DomainCreateA)
        return 0;
    if (out == NULL) { /* one log for every client that loads this library */
        out = fopen(path, "w");
        if (out == NULL)
            return 0;
        atexit(flush_log);
    }
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)create_domain;
    *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
