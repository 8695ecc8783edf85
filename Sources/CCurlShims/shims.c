#include "CCurlShims.h"

CURLcode ecw_curl_set_long(CURL *easy, CURLoption option, long value) { return curl_easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_offset(CURL *easy, CURLoption option, curl_off_t value) { return curl_easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_string(CURL *easy, CURLoption option, const char *value) { return curl_easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_pointer(CURL *easy, CURLoption option, void *value) { return curl_easy_setopt(easy, option, value); }
CURLcode ecw_curl_set_write_function(CURL *easy, ecw_curl_write_fn function, void *context) {
    CURLcode rc = curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, function);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(easy, CURLOPT_WRITEDATA, context);
}
CURLcode ecw_curl_get_long(CURL *easy, CURLINFO info, long *value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ecw_curl_get_offset(CURL *easy, CURLINFO info, curl_off_t *value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ecw_curl_get_pointer(CURL *easy, CURLINFO info, void **value) { return curl_easy_getinfo(easy, info, value); }
