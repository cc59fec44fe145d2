// trun's entry point: everything else is in the library.
#include "cli/commands.h"

int main(int argc, char** argv) { return trun::cli::Main(argc, argv); }
