/*
 * tests/crit/criterion/criterion.h — the subset of Criterion's API the urt
 * suites use, for ThreadSanitizer builds only.
 *
 * Why: Criterion 2.4 (through BoxFort) maps an "inheritable arena" at a
 * random address between 0x2000'0000'0000 and 0x7f00'0000'0000 and refuses
 * any page mincore() reports as mapped. ThreadSanitizer reserves nearly all
 * of that range (PROT_NONE), so every try fails and a TSan-instrumented
 * Criterion binary dies at start ("Could not initialize inheritable arena").
 * With this header first on the include path, the same test sources build
 * against a small runner (crit_main.c) that forks one process per test,
 * like Criterion, and prints Criterion's synthesis line.
 *
 * Supported: Test(suite, name, .timeout = s, .init = f, .fini = f,
 * .disabled = b, .description = "…"), cr_assert, cr_assert_not,
 * cr_assert_eq/neq/lt/leq/gt/geq, cr_assert_null/not_null, cr_assert_str_eq/
 * str_neq, cr_assert_fail, the cr_expect variants (non-fatal), cr_skip_test,
 * cr_log_info/warn/error. Messages: an optional printf format (a literal) and
 * arguments after the checked values, as in Criterion.
 */
#ifndef URT_TESTS_CRIT_CRITERION_H
#define URT_TESTS_CRIT_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct crit_options {
    int unused_;
    double timeout;
    void (*init)(void);
    void (*fini)(void);
    bool disabled;
    const char *description;
};

struct crit_test {
    const char *suite;
    const char *name;
    void (*fn)(void);
    struct crit_options opt;
    struct crit_test *next;
};

void crit_register(struct crit_test *t);
_Noreturn void crit_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void crit_expect_failed(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn void crit_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void crit_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define Test(Suite, Name, ...)                                                                          \
    static void crit_fn_##Suite##_##Name(void);                                                       \
    static struct crit_test crit_t_##Suite##_##Name = {#Suite, #Name, crit_fn_##Suite##_##Name,       \
                                                       {0, __VA_ARGS__}, NULL};                       \
    __attribute__((constructor)) static void crit_reg_##Suite##_##Name(void)                          \
    {                                                                                                 \
        crit_register(&crit_t_##Suite##_##Name);                                                     \
    }                                                                                                 \
    static void crit_fn_##Suite##_##Name(void)

#define CRIT_CHECK_(Fatal, Cond, Expr, ...)                                                            \
    do {                                                                                              \
        if (!(Cond)) {                                                                                \
            if (Fatal)                                                                                \
                crit_fail(__FILE__, __LINE__, Expr, " " __VA_ARGS__);                                 \
            else                                                                                      \
                crit_expect_failed(__FILE__, __LINE__, Expr, " " __VA_ARGS__);                        \
        }                                                                                             \
    } while (0)

#define cr_assert(Cond, ...) CRIT_CHECK_(1, (Cond), #Cond, __VA_ARGS__)
#define cr_assert_not(Cond, ...) CRIT_CHECK_(1, !(Cond), "!(" #Cond ")", __VA_ARGS__)
#define cr_assert_eq(A, B, ...) CRIT_CHECK_(1, (A) == (B), #A " == " #B, __VA_ARGS__)
#define cr_assert_neq(A, B, ...) CRIT_CHECK_(1, (A) != (B), #A " != " #B, __VA_ARGS__)
#define cr_assert_lt(A, B, ...) CRIT_CHECK_(1, (A) < (B), #A " < " #B, __VA_ARGS__)
#define cr_assert_leq(A, B, ...) CRIT_CHECK_(1, (A) <= (B), #A " <= " #B, __VA_ARGS__)
#define cr_assert_gt(A, B, ...) CRIT_CHECK_(1, (A) > (B), #A " > " #B, __VA_ARGS__)
#define cr_assert_geq(A, B, ...) CRIT_CHECK_(1, (A) >= (B), #A " >= " #B, __VA_ARGS__)
#define cr_assert_null(P, ...) CRIT_CHECK_(1, (P) == NULL, #P " == NULL", __VA_ARGS__)
#define cr_assert_not_null(P, ...) CRIT_CHECK_(1, (P) != NULL, #P " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(A, B, ...) CRIT_CHECK_(1, strcmp((A), (B)) == 0, #A " equals " #B, __VA_ARGS__)
#define cr_assert_str_neq(A, B, ...) CRIT_CHECK_(1, strcmp((A), (B)) != 0, #A " differs from " #B, __VA_ARGS__)
#define cr_assert_fail(...) crit_fail(__FILE__, __LINE__, "cr_assert_fail", " " __VA_ARGS__)

#define cr_expect(Cond, ...) CRIT_CHECK_(0, (Cond), #Cond, __VA_ARGS__)
#define cr_expect_not(Cond, ...) CRIT_CHECK_(0, !(Cond), "!(" #Cond ")", __VA_ARGS__)
#define cr_expect_eq(A, B, ...) CRIT_CHECK_(0, (A) == (B), #A " == " #B, __VA_ARGS__)
#define cr_expect_neq(A, B, ...) CRIT_CHECK_(0, (A) != (B), #A " != " #B, __VA_ARGS__)
#define cr_expect_lt(A, B, ...) CRIT_CHECK_(0, (A) < (B), #A " < " #B, __VA_ARGS__)
#define cr_expect_leq(A, B, ...) CRIT_CHECK_(0, (A) <= (B), #A " <= " #B, __VA_ARGS__)
#define cr_expect_gt(A, B, ...) CRIT_CHECK_(0, (A) > (B), #A " > " #B, __VA_ARGS__)
#define cr_expect_geq(A, B, ...) CRIT_CHECK_(0, (A) >= (B), #A " >= " #B, __VA_ARGS__)

#define cr_skip_test(...) crit_skip(" " __VA_ARGS__)
#define cr_log_info(...) crit_log("info", __VA_ARGS__)
#define cr_log_warn(...) crit_log("warn", __VA_ARGS__)
#define cr_log_error(...) crit_log("error", __VA_ARGS__)

#endif
