#include "CCurlShims.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    const char *(*multi_strerror)(CURLMcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];
static int loaded = -1;

#define SYMBOL(field, name)                                                              \
    do {                                                                                 \
        *(void **)(&curl.field) = dlsym(handle, name);                                   \
        if (!curl.field) {                                                               \
            snprintf(load_error, sizeof(load_error), "libcurl.so.4 has no %s", name);    \
            return;                                                                      \
        }                                                                                \
    } while (0)

static void load(void) {
    void *handle = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(load_error, sizeof(load_error), "cannot load libcurl.so.4 (install libcurl4): %s", dlerror());
        return;
    }
    SYMBOL(global_init, "curl_global_init");
    SYMBOL(easy_init, "curl_easy_init");
    SYMBOL(easy_cleanup, "curl_easy_cleanup");
    SYMBOL(easy_strerror, "curl_easy_strerror");
    SYMBOL(easy_setopt, "curl_easy_setopt");
    SYMBOL(easy_getinfo, "curl_easy_getinfo");
    SYMBOL(multi_init, "curl_multi_init");
    SYMBOL(multi_add_handle, "curl_multi_add_handle");
    SYMBOL(multi_remove_handle, "curl_multi_remove_handle");
    SYMBOL(multi_perform, "curl_multi_perform");
    SYMBOL(multi_poll, "curl_multi_poll");
    SYMBOL(multi_wakeup, "curl_multi_wakeup");
    SYMBOL(multi_info_read, "curl_multi_info_read");
    SYMBOL(multi_strerror, "curl_multi_strerror");
    SYMBOL(slist_append, "curl_slist_append");
    SYMBOL(slist_free_all, "curl_slist_free_all");
    loaded = 0;
}

int ecw_curl_load(char *error, size_t error_size) {
    pthread_once(&once, load);
    if (loaded != 0 && error && error_size > 0) snprintf(error, error_size, "%s", load_error);
    return loaded;
}

// Every function below runs only after ecw_curl_load() returned 0.
CURLcode ecw_curl_global_init(long flags) { return curl.global_init(flags); }
CURL *ecw_curl_easy_init(void) { return curl.easy_init(); }
void ecw_curl_easy_cleanup(CURL *easy) { curl.easy_cleanup(easy); }
const char *ecw_curl_easy_strerror(CURLcode code) { return curl.easy_strerror(code); }
CURLM *ecw_curl_multi_init(void) { return curl.multi_init(); }
CURLMcode ecw_curl_multi_add_handle(CURLM *multi, CURL *easy) { return curl.multi_add_handle(multi, easy); }
CURLMcode ecw_curl_multi_remove_handle(CURLM *multi, CURL *easy) { return curl.multi_remove_handle(multi, easy); }
CURLMcode ecw_curl_multi_perform(CURLM *multi, int *running) { return curl.multi_perform(multi, running); }
CURLMcode ecw_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready) {
    return curl.multi_poll(multi, extra, count, timeout_ms, ready);
}
CURLMcode ecw_curl_multi_wakeup(CURLM *multi) { return curl.multi_wakeup(multi); }
CURLMsg *ecw_curl_multi_info_read(CURLM *multi, int *queued) { return curl.multi_info_read(multi, queued); }
const char *ecw_curl_multi_strerror(CURLMcode code) { return curl.multi_strerror(code); }
struct curl_slist *ecw_curl_slist_append(struct curl_slist *list, const char *text) { return curl.slist_append(list, text); }
void ecw_curl_slist_free_all(struct curl_slist *list) { curl.slist_free_all(list); }

CURLcode ecw_curl_set_long(CURL *easy, CURLoption option, long value) { return curl.easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_offset(CURL *easy, CURLoption option, curl_off_t value) { return curl.easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_string(CURL *easy, CURLoption option, const char *value) { return curl.easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_pointer(CURL *easy, CURLoption option, void *value) { return curl.easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_write_function(CURL *easy, ecw_curl_write_fn function, void *context) {
    CURLcode rc = curl.easy_setopt(easy, CURLOPT_WRITEFUNCTION, function);
    if (rc != CURLE_OK) return rc;
    return curl.easy_setopt(easy, CURLOPT_WRITEDATA, context);
}
CURLcode ecw_curl_get_long(CURL *easy, CURLINFO info, long *value) { return curl.easy_getinfo(easy, info, value); }
