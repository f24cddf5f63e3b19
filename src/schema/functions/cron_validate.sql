-- Refuses a cron expression or a time zone that pgc_cron_parse() (src/cron/cron.c) would
-- refuse, with SQLSTATE 22023 and a message naming the field: the same grammar, written again
-- here so that a client in any language gets the same answer from cron_add(). Five fields
-- (minute hour day-of-month month day-of-week) or six (seconds first), separated by spaces or
-- tabs; each field a list of values, ranges and steps ("1,15", "1-5", "*/15", "1-30/3", "5/10")
-- or "*" alone or with a step; JAN..DEC and SUN..SAT in any case; day-of-week 0-7; the macros
-- @yearly @annually @monthly @weekly @daily @midnight @hourly (@reboot refused); an expression
-- whose days can never come ("0 0 30 2 *") refused. The zone: NULL, '' and 'UTC' are UTC;
-- otherwise a name of tzdata (letters, digits, / _ + - ., no empty, "." or ".." part) that
-- pg_timezone_names knows, and not a right/ zone (leap seconds). The C parser is the
-- authority: tests/pg/test_cron_sched.c feeds one table of expressions to both.
CREATE OR REPLACE FUNCTION @S@.cron_validate(p_expr text, p_tz text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    fname  text[]  := ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    flo    int[]   := ARRAY[0, 0, 0, 1, 1, 0];
    fhi    int[]   := ARRAY[59, 59, 23, 31, 12, 7];
    fallow text[]  := ARRAY['0-59', '0-59', '0-23', '1-31', '1-12 or JAN-DEC',
                            '0-7 (0 and 7 are Sunday) or SUN-SAT'];
    months text[]  := ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT',
                            'NOV', 'DEC'];
    days   text[]  := ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
    mdays  int[]   := ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    e text;
    w text;
    fields text[];
    nf int;
    i int;
    k int;
    f text;
    fi int;
    elems text[];
    el text;
    rest text;
    tok text;
    a int;
    b int;
    st int;
    lo int;
    hi int;
    allow text;
    dom_mask bigint := 0;
    mon_mask bigint := 0;
    mask bigint;
    dom_star boolean := false;
    dow_star boolean := false;
    any_day boolean;
    part text;
    ranged boolean;
BEGIN
    IF p_expr IS NULL THEN
        RAISE EXCEPTION 'cron expression is NULL' USING ERRCODE = '22004';
    END IF;
    IF octet_length(p_expr) > 1024 THEN
        RAISE EXCEPTION 'cron expression is longer than 1024 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_expr ~ '[\x01-\x08\x0a-\x1f\x7f]' THEN
        RAISE EXCEPTION 'cron expression has a control character' USING ERRCODE = '22023';
    END IF;
    e := btrim(p_expr, E' \t');
    IF e = '' THEN
        RAISE EXCEPTION 'cron expression is empty' USING ERRCODE = '22023';
    END IF;
    IF left(e, 1) = '@' THEN
        w := substring(e FROM '^[^ \t]*');
        IF w ~* '^@reboot$' THEN
            RAISE EXCEPTION '@reboot is not supported: a schedule shared by a fleet has no single boot to run after (use a service manager, or @hourly and the like)'
                USING ERRCODE = '22023';
        END IF;
        IF w !~* '^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$' THEN
            RAISE EXCEPTION 'unknown macro "%" (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)',
                left(w, 64) USING ERRCODE = '22023';
        END IF;
        IF w <> e THEN
            RAISE EXCEPTION '"%": a macro stands alone, without fields after it', left(e, 64)
                USING ERRCODE = '22023';
        END IF;
        e := CASE lower(w) WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
                           WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
                           WHEN '@hourly' THEN '0 * * * *' ELSE '0 0 * * *' END;
    END IF;
    fields := regexp_split_to_array(e, '[ \t]+');
    nf := cardinality(fields);
    IF nf NOT IN (5, 6) THEN
        RAISE EXCEPTION 'expected 5 fields (minute hour day-of-month month day-of-week) or 6 (a seconds field first), got %',
            nf USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. nf LOOP
        f := fields[i];
        fi := i + 6 - nf;               -- 1 second .. 6 day-of-week
        lo := flo[fi];
        hi := fhi[fi];
        allow := fallow[fi];
        mask := 0;
        elems := string_to_array(f, ',');
        FOREACH el IN ARRAY elems LOOP
            IF el = '' THEN
                RAISE EXCEPTION '% field "%": an element of the list is empty', fname[fi], left(f, 64)
                    USING ERRCODE = '22023';
            END IF;
            st := 1;
            IF left(el, 1) = '*' THEN
                IF cardinality(elems) > 1 THEN
                    RAISE EXCEPTION '% field "%": "*" cannot be combined with other values in a list',
                        fname[fi], left(f, 64) USING ERRCODE = '22023';
                END IF;
                a := lo;
                b := hi;
                rest := substr(el, 2);
                IF left(rest, 1) = '/' THEN
                    tok := substring(rest FROM '^/([0-9]*)');
                    rest := substr(rest, 2 + length(tok));
                    IF tok = '' THEN
                        RAISE EXCEPTION '% field "%": a step (a number from 1 to %) must follow "/"',
                            fname[fi], left(f, 64), hi USING ERRCODE = '22023';
                    END IF;
                    IF length(tok) > 6 OR tok::int < 1 OR tok::int > hi THEN
                        RAISE EXCEPTION '% field "%": step % is out of range 1-%', fname[fi], left(f, 64),
                            left(tok, 10), hi USING ERRCODE = '22023';
                    END IF;
                    st := tok::int;
                END IF;
                IF fi = 4 THEN dom_star := true; END IF;
                IF fi = 6 THEN dow_star := true; END IF;
            ELSE
                rest := el;
                ranged := false;
                -- A value, then "-" and a value, then "/" and a step; or a value and "/" and a
                -- step (from the value to the field's maximum).
                FOR k IN 1 .. 2 LOOP
                    tok := substring(rest FROM '^([0-9]+|[A-Za-z]+)');
                    IF tok IS NULL THEN
                        part := left(rest, 1);
                        IF part <> '' AND strpos('LW#?', part) > 0 THEN
                            RAISE EXCEPTION '% field "%": L, W, # and ? are not supported (allowed: %, with lists, ranges and steps)',
                                fname[fi], left(f, 64), allow USING ERRCODE = '22023';
                        ELSIF part = '' THEN
                            RAISE EXCEPTION '% field "%": a value is missing (allowed: %)', fname[fi],
                                left(f, 64), allow USING ERRCODE = '22023';
                        END IF;
                        RAISE EXCEPTION '% field "%": unexpected "%" (allowed: %, with lists, ranges and steps)',
                            fname[fi], left(f, 64), part, allow USING ERRCODE = '22023';
                    END IF;
                    rest := substr(rest, length(tok) + 1);
                    IF tok ~ '^[0-9]' THEN
                        IF length(tok) > 6 OR tok::int < lo OR tok::int > hi THEN
                            RAISE EXCEPTION '% field "%": % is out of range %-%', fname[fi], left(f, 64),
                                left(tok, 64), lo, hi USING ERRCODE = '22023';
                        END IF;
                        b := tok::int;
                    ELSIF fi = 5 AND length(tok) = 3 AND array_position(months, upper(tok)) IS NOT NULL THEN
                        b := array_position(months, upper(tok));
                    ELSIF fi = 6 AND length(tok) = 3 AND array_position(days, upper(tok)) IS NOT NULL THEN
                        b := array_position(days, upper(tok)) - 1;
                    ELSIF fi = 5 THEN
                        RAISE EXCEPTION '% field "%": % is not a month name (JAN..DEC or 1-12)', fname[fi],
                            left(f, 64), left(tok, 64) USING ERRCODE = '22023';
                    ELSIF fi = 6 THEN
                        RAISE EXCEPTION '% field "%": % is not a day name (SUN..SAT or 0-7)', fname[fi],
                            left(f, 64), left(tok, 64) USING ERRCODE = '22023';
                    ELSIF strpos('LW', left(tok, 1)) > 0 THEN
                        RAISE EXCEPTION '% field "%": L, W, # and ? are not supported (allowed: %, with lists, ranges and steps)',
                            fname[fi], left(f, 64), allow USING ERRCODE = '22023';
                    ELSE
                        RAISE EXCEPTION '% field "%": % is not a number (allowed: %)', fname[fi], left(f, 64),
                            left(tok, 64), allow USING ERRCODE = '22023';
                    END IF;
                    IF k = 1 THEN
                        a := b;
                        EXIT WHEN left(rest, 1) <> '-';
                        rest := substr(rest, 2);
                    ELSE
                        ranged := true;
                        CONTINUE WHEN b >= a;
                        RAISE EXCEPTION '% field "%": % is a range whose start % is after its end %', fname[fi],
                            left(f, 64), left(el, 64), a, b USING ERRCODE = '22023';
                    END IF;
                END LOOP;
                IF left(rest, 1) = '/' THEN
                    IF NOT ranged THEN
                        b := hi;        -- "5/10": from 5 to the maximum
                    END IF;
                    tok := substring(rest FROM '^/([0-9]*)');
                    rest := substr(rest, 2 + length(tok));
                    IF tok = '' THEN
                        RAISE EXCEPTION '% field "%": a step (a number from 1 to %) must follow "/"',
                            fname[fi], left(f, 64), hi USING ERRCODE = '22023';
                    END IF;
                    IF length(tok) > 6 OR tok::int < 1 OR tok::int > hi THEN
                        RAISE EXCEPTION '% field "%": step % is out of range 1-%', fname[fi], left(f, 64),
                            left(tok, 10), hi USING ERRCODE = '22023';
                    END IF;
                    st := tok::int;
                END IF;
            END IF;
            IF rest <> '' THEN
                RAISE EXCEPTION '% field "%": unexpected "%" (allowed: %, with lists, ranges and steps)',
                    fname[fi], left(f, 64), left(rest, 1), allow USING ERRCODE = '22023';
            END IF;
            FOR k IN a .. b BY st LOOP
                mask := mask | (1::bigint << k);
            END LOOP;
        END LOOP;
        IF fi = 4 THEN dom_mask := mask; END IF;
        IF fi = 5 THEN mon_mask := mask; END IF;
    END LOOP;
    -- Never firing: both days must match, and no month of the month field has a day of the
    -- day-of-month field (February has a 29th).
    IF dom_star OR dow_star THEN
        any_day := false;
        FOR i IN 1 .. 12 LOOP
            CONTINUE WHEN mon_mask & (1::bigint << i) = 0;
            any_day := any_day OR dom_mask & ((1::bigint << (mdays[i] + 1)) - 2) <> 0;
        END LOOP;
        IF NOT any_day THEN
            RAISE EXCEPTION '"%" can never fire: no month of the month field has a day of the day-of-month field',
                left(p_expr, 64) USING ERRCODE = '22023';
        END IF;
    END IF;

    IF p_tz IS NULL OR p_tz IN ('', 'UTC') THEN
        RETURN;
    END IF;
    IF octet_length(p_tz) > 255 THEN
        RAISE EXCEPTION 'time zone name is longer than 255 bytes' USING ERRCODE = '22023';
    END IF;
    IF left(p_tz, 1) = '/' THEN
        RAISE EXCEPTION 'time zone "%": give a zone name such as Europe/Berlin, not a path', left(p_tz, 100)
            USING ERRCODE = '22023';
    END IF;
    IF p_tz !~ '^[A-Za-z0-9/_+.-]+$' THEN
        RAISE EXCEPTION 'time zone "%": a zone name has only letters, digits and / _ + - . (such as Europe/Berlin)',
            left(p_tz, 100) USING ERRCODE = '22023';
    END IF;
    FOREACH part IN ARRAY string_to_array(p_tz, '/') LOOP
        IF part IN ('', '.', '..') THEN
            RAISE EXCEPTION 'time zone "%": empty, "." and ".." parts are not allowed in a zone name',
                left(p_tz, 100) USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF p_tz LIKE 'right/%' THEN
        RAISE EXCEPTION 'time zone "%" counts leap seconds: use the zone without right/', left(p_tz, 100)
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = p_tz) THEN
        RAISE EXCEPTION 'unknown time zone "%" (not in pg_timezone_names)', left(p_tz, 100)
            USING ERRCODE = '22023';
    END IF;
END
$$;
