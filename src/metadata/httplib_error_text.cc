#include "metadata/httplib_error_text.h"

#include "common/connect_error.h"

namespace ferry {

std::string HttpRequestFailureText(httplib::Error error, const HostPort& server,
                                   std::chrono::steady_clock::duration elapsed,
                                   std::chrono::milliseconds timeout) {
  switch (error) {
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
      return "could not connect: " + DescribeConnectFailure(server, elapsed, timeout);
    case httplib::Error::Read:
      return elapsed >= timeout
                 ? "no reply within " + MillisText(elapsed)
                 : "the connection closed before the reply (after " + MillisText(elapsed) + ")";
    case httplib::Error::Write:
      return (elapsed >= timeout ? "could not send the request within "
                                 : "could not send the request: the connection closed after ") +
             MillisText(elapsed);
    default:
      return "HTTP client error " + httplib::to_string(error) + " after " + MillisText(elapsed);
  }
}

}  // namespace ferry
