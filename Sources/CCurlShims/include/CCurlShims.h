// Fixed-signature wrappers over libcurl's variadic calls (curl_easy_setopt,
// curl_easy_getinfo), which Swift cannot call.
#ifndef CCURLSHIMS_H
#define CCURLSHIMS_H
#include <curl/curl.h>

typedef size_t (*ecw_curl_write_fn)(char *data, size_t size, size_t count, void *context);

CURLcode ecw_curl_set_long(CURL *easy, CURLoption option, long value);
CURLcode ecw_curl_set_offset(CURL *easy, CURLoption option, curl_off_t value);
CURLcode ecw_curl_set_string(CURL *easy, CURLoption option, const char *value);
CURLcode ecw_curl_set_pointer(CURL *easy, CURLoption option, void *value);
CURLcode ecw_curl_set_write_function(CURL *easy, ecw_curl_write_fn function, void *context);
CURLcode ecw_curl_get_long(CURL *easy, CURLINFO info, long *value);
CURLcode ecw_curl_get_offset(CURL *easy, CURLINFO info, curl_off_t *value);
CURLcode ecw_curl_get_pointer(CURL *easy, CURLINFO info, void **value);
#endif
