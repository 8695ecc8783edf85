// libcurl through dlopen, behind fixed-signature functions.
//
// Why dlopen: linking libcurl maps it and its whole dependency tree (OpenSSL, GnuTLS,
// Kerberos, LDAP, p11-kit...) at start, about 6 MiB of resident memory, in a daemon that
// may never make a request (mode off, Bluetooth). The headers still come from Debian's
// libcurl4-openssl-dev through the CCurl systemLibrary target; the library is loaded with
// the first request. Also: Swift cannot call the variadic curl_easy_setopt/getinfo.
#ifndef CCURLSHIMS_H
#define CCURLSHIMS_H
#include <curl/curl.h>
#include <stddef.h>

/// Loads libcurl.so.4 once. Returns 0, or -1 with the reason in `error`.
int ecw_curl_load(char *error, size_t error_size);

typedef size_t (*ecw_curl_write_fn)(char *data, size_t size, size_t count, void *context);

CURLcode ecw_curl_global_init(long flags);
CURL *ecw_curl_easy_init(void);
void ecw_curl_easy_cleanup(CURL *easy);
const char *ecw_curl_easy_strerror(CURLcode code);
CURLM *ecw_curl_multi_init(void);
CURLMcode ecw_curl_multi_add_handle(CURLM *multi, CURL *easy);
CURLMcode ecw_curl_multi_remove_handle(CURLM *multi, CURL *easy);
CURLMcode ecw_curl_multi_perform(CURLM *multi, int *running);
CURLMcode ecw_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready);
CURLMcode ecw_curl_multi_wakeup(CURLM *multi);
CURLMsg *ecw_curl_multi_info_read(CURLM *multi, int *queued);
const char *ecw_curl_multi_strerror(CURLMcode code);
struct curl_slist *ecw_curl_slist_append(struct curl_slist *list, const char *text);
void ecw_curl_slist_free_all(struct curl_slist *list);

CURLcode ecw_curl_set_long(CURL *easy, CURLoption option, long value);
CURLcode ecw_curl_set_offset(CURL *easy, CURLoption option, curl_off_t value);
CURLcode ecw_curl_set_string(CURL *easy, CURLoption option, const char *value);
CURLcode ecw_curl_set_pointer(CURL *easy, CURLoption option, void *value);
CURLcode ecw_curl_set_write_function(CURL *easy, ecw_curl_write_fn function, void *context);
CURLcode ecw_curl_get_long(CURL *easy, CURLINFO info, long *value);
#endif
