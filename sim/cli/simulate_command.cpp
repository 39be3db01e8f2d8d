// stratsim simulate / stratsim platforms (filled in by the engine work).
#include "command.hpp"
