#include "cf_cli.h"

int main(int argc, char **argv)
{
    return cf_cli_main(argc, argv);
}
