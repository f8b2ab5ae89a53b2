/* confdefs.h */
#define PACKAGE_NAME "tac-memcached"
#define PACKAGE_TARNAME "tac-memcached"
#define PACKAGE_VERSION "0.1.0"
#define PACKAGE_STRING "tac-memcached 0.1.0"
#define PACKAGE_BUGREPORT ""
#define PACKAGE_URL ""
#define PACKAGE "tac-memcached"
#define VERSION "0.1.0"
#define HAVE_STDIO_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_INTTYPES_H 1
